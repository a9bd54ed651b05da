"""The mesh side of one router, sans-IO: topology, subscription gossip, anti-entropy and
reliable transfer, wired to the delivery engine.

Inputs are method calls (a link to a peer came up or went down, a frame arrived, time passed,
the engine produced a mesh action); outputs are `(peer, frame)` pairs collected with
`take_frames()`, plus calls into the engine. No sockets and no clock: the runtime
(`mesh/runtime.py`) or a simulator drives it, which is what makes the deterministic
simulation in the tests possible.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from router.core import events as ev
from router.core.actions import Forget, Forward, MeshAction, StoredAt, Subscribed, Verdict
from router.core.engine import Engine
from router.core.records import AT_LEAST_ONCE

from .gossip import Gossip, RouterRestarted, SubChange
from .sync import MeshSync
from .topology import Topology
from .transfer import Transfer

log = logging.getLogger("exactmesh.mesh")

MSG, VERDICT, FORGET, BATCH = "msg", "verdict", "forget", "batch"
RETAIN = "retain"  # an MQTT retained message, shared with every router (mqtt_edge/retained.py)
# A verdict told to an origin the record answered before its current one (Verdict.former): an
# item of its own, which a router that predates it ignores (it reads exactly five elements
# of a "verdict").
FORMER_VERDICT = "former-verdict"
# A destination's relay store holds copies of the origin's message (StoredAt): ["stored", id,
# keys]. Not an acceptance; a router that does not know the kind ignores it (`_consume`), and
# its parts then wait for the verdict as before.
STORED = "stored"
# To a router that restarted: the warm subscribers of its previous run we hold as away
# (`Engine.away_from`), so that it owes them too: ["away", entries]. Sent before the DIGEST
# of the link that meets the new run, so it arrives before that router can join the mesh
# (`start_joining`). A router that does not know the kind ignores it.
AWAY = "away"
MAX_BATCH = 256  # items in one transfer item: bounds a frame to about this many messages


class MeshNode:
    def __init__(
        self,
        me: str,
        inc: int,
        engine: Engine,
        *,
        unreachable_timeout: float = 30.0,
        gossip_interval: float = 0.5,
        transfer_window: int = 4096,
    ) -> None:
        self.me = me
        self.inc = inc
        self.engine = engine
        self.unreachable_timeout = unreachable_timeout
        self.gossip_interval = gossip_interval
        self.topology = Topology(me, inc)
        self.peers_seen: set[str] = set()  # every peer a link came up to (for metrics)
        self.sub_changes = 0  # remote subscriptions added or removed by gossip (for metrics)
        # Peer -> (bytes sent, bytes received) on its link now: the runtime sets it.
        self.link_bytes: Callable[[], dict[str, tuple[int, int]]] = dict
        self.gossip = Gossip(me, inc)
        self.sync = MeshSync(self.topology, self.gossip)
        self.transfer = Transfer(me, inc, window=transfer_window)
        self.neighbors: dict[str, int] = {}  # up links: peer -> cost
        self._frames: list[tuple[str, dict]] = []
        self._next_digest = 0.0
        self._unreachable_since: dict[str, float] = {}
        # Routers given up after the unreachable timeout, with the reason their subscribers
        # fail for; and the messages they may still hold records of, to forget when they are
        # back (same incarnation) so those records do not outlive the partition.
        self._given_up: dict[str, str] = {}
        self._owed_forgets: dict[str, set[str]] = {}
        # Verdicts for a given-up origin, sent when it is back: it may not have given up on
        # us, and its publishers wait for them.
        self._owed_verdicts: dict[str, list[list]] = {}
        # Items for routers whose incarnation we do not know yet (heard of by gossip only).
        self._waiting_inc: dict[str, list[list]] = {}
        self._known_inc: dict[str, int] = {}  # the incarnation we last saw of each router
        self.frames_sent = 0
        # Items for the same destinations, in the order the engine produced them, go as one
        # transfer item: one frame, one sequence number and one ack for a burst of messages.
        self._run_dests: tuple[str, ...] = ()
        self._run_items: list[list] = []
        self._now = 0.0
        # MQTT retained messages (registered by the MQTT edge, `attach_retained`; without one
        # they are not kept here): what to do with one another router shared, and this
        # router's own, for a router that becomes reachable.
        self.on_retained: Callable[[str, list], Any] | None = None
        self.retained_source: Callable[[str, set[str]], list[list]] | None = None
        self._reached: set[str] = set()
        # Joining (`start_joining`): until when we wait to hear the mesh's subscriptions, and,
        # once a peer's DIGEST told us what it knows, the origins whose tables we still lack.
        self._joining = False
        self._join_deadline: float | None = None  # None past it (or when not joining)
        self._join_started = 0.0
        self._alone_after = False  # past the join timeout: serve alone rather than fail
        self._join_wait: dict[str, tuple[int, int]] | None = None

    # ------------------------------------------------------------------ output

    def take_frames(self) -> list[tuple[str, dict]]:
        self._flush_run()
        frames, self._frames = self._frames, []
        self.frames_sent += len(frames)
        return frames

    def _send(self, peer: str, frame: dict) -> None:
        self._frames.append((peer, frame))

    def _flood(self, frame: dict, except_peer: str | None = None) -> None:
        for peer in self.neighbors:
            if peer != except_peer:
                self._send(peer, frame)

    # ------------------------------------------------------------------ joining

    def start_joining(self, now: float, timeout: float, alone_after: bool = False) -> None:
        """A router that starts with peers to reach knows none of the subscribers behind
        them; a message accepted now would be owed to local subscribers only, and one
        published while it restarted cut off from its peers would reach nobody there
        (test bed finding, `python -m tests.hosts restart-isolated`). So guaranteed messages
        wait in the engine until a peer's gossip has told us the mesh's subscriptions. Past
        `timeout` (`join-timeout`) they fail, not in doubt, as do those published until then:
        as a router that gave up on a peer fails what is owed there. `alone_after` (a router
        that only listens, which may be the first of its mesh to start): past the timeout
        it serves the subscribers it knows instead."""
        self._alone_after = alone_after
        self._joining = True
        self._join_deadline = now + timeout
        self._join_started = now
        self.engine.handle(ev.MeshJoining(now))
        log.info("router %s: waiting up to %g s to hear the mesh's subscriptions before "
                 "routing guaranteed messages (join-timeout)", self.me, timeout)

    @property
    def joining(self) -> bool:
        return self._joining

    def _digest_while_joining(self, peer: str, frame: dict) -> None:
        """A peer's DIGEST says which subscription tables it holds: we have joined once we
        hold each of them at least as new (the PULL that `sync.on_digest` sent fetches them)."""
        held = self.gossip.versions()
        want: dict[str, tuple[int, int]] = {}
        for origin, entry in frame["entries"].items():
            inc, subs_ver = entry[0], entry[2]
            if origin != self.me and subs_ver >= 0 and (held.get(origin) or (-1, -1)) < (
                    inc, subs_ver):
                want[origin] = (inc, subs_ver)
        self._join_wait = want
        self._check_joined(peer)

    def _check_joined(self, peer: str) -> None:
        want = self._join_wait
        if want is None:
            return
        held = self.gossip.versions()
        for origin in [o for o, v in want.items() if (held.get(o) or (-1, -1)) >= v]:
            del want[origin]
        if not want:
            subs = sum(len(self.gossip.table(o)) for o in held if o != self.me)
            log.info("router %s joined the mesh through %s after %.2f s: knows %d subscribers "
                     "on other routers; routing %d messages that waited", self.me, peer,
                     self._now - self._join_started, subs, self.engine.joining() or 0)
            self._joined()

    def _join_timed_out(self, now: float) -> None:
        waited = now - self._join_started
        self._join_deadline = None
        if self._alone_after:
            log.warning("router %s heard no peer's subscriptions within %.1f s of starting; "
                        "serving the subscribers it knows (%d guaranteed messages waited). A "
                        "router that only listens cannot tell a first start from a restart cut "
                        "off from its peers: give it a connect line to wait for them instead",
                        self.me, waited, self.engine.joining() or 0)
            self._joined()
            return
        peers = (f"linked to {', '.join(sorted(self.neighbors))}" if self.neighbors
                 else "no peer linked")
        description = (
            f"not routed: router {self.me} has not heard the mesh's subscriptions since it "
            f"started {waited:.0f} s ago ({peers}), so it cannot tell who is owed this "
            f"message and sent it to nobody. Publish it again once the router has joined "
            f"(its /health shows joining null), or set its join-timeout to 0 to serve the "
            f"subscribers it knows alone")
        log.warning("router %s heard no peer's subscriptions within %.1f s of starting: "
                    "failing the %d guaranteed messages that waited and those published until "
                    "it does (join-timeout)", self.me, waited, self.engine.joining() or 0)
        self.engine.handle(ev.MeshJoinTimedOut(now, description))

    def _joined(self) -> None:
        self._joining = False
        self._join_deadline = None
        self._join_wait = None
        self.engine.handle(ev.MeshJoined(self._now))

    # ------------------------------------------------------------------ links

    def link_up(self, peer: str, peer_inc: int, cost: int, now: float) -> None:
        self._now = now
        self.neighbors[peer] = cost
        self.peers_seen.add(peer)
        self._saw_incarnation(peer, peer_inc)
        self._flood(self.topology.set_neighbors(dict(self.neighbors)))
        self._send(peer, self.sync.digest())
        self._after_topology_change(now)

    def link_down(self, peer: str, now: float) -> None:
        self._now = now
        if self.neighbors.pop(peer, None) is None:
            return
        self._flood(self.topology.set_neighbors(dict(self.neighbors)))
        self._after_topology_change(now)

    def _after_topology_change(self, now: float) -> None:
        reachable = self.topology.reachable()
        for router in sorted(reachable - self._reached):
            self._send_retained_to(router, now)
            # What it had not acknowledged goes again now, not when the backed-off RTO says.
            self.transfer.route_restored(router, now)
        self._reached = set(reachable)
        for router in list(self._unreachable_since):
            if router in reachable:
                del self._unreachable_since[router]
        for router in [r for r in self._given_up if r in reachable]:
            self._welcome_back(router, now)
        for router in self._interested_routers():
            if router not in reachable:
                self._unreachable_since.setdefault(router, now)
        # Whatever waited for a route may go now.
        self._route_frames(self.transfer.tick(now), now)

    def _interested_routers(self) -> list[str]:
        # sorted: the order of simultaneous give-ups must not depend on string hashing
        return sorted(origin for origin in self.gossip.versions() if origin != self.me)

    # ------------------------------------------------------------------ frames

    def on_frame(self, peer: str, frame: dict, now: float) -> None:
        self._now = now
        t = frame["t"]
        if t in ("DATA", "ACK"):
            self._route(frame, now)
        elif t == "LSA":
            if self.topology.on_lsa(frame):
                self._saw_incarnation(frame["origin"], frame["inc"])
                self._flood(frame, except_peer=peer)
                self._after_topology_change(now)
        elif t == "SUBS":
            changes, reflood, pull = self.gossip.on_subs(frame)
            if changes or reflood:
                self._saw_incarnation(frame["origin"], frame["inc"])
            if reflood:
                self._flood(frame, except_peer=peer)
            if pull is not None:
                self._send(peer, pull)
            self._apply_gossip(changes)
            if self._join_wait is not None:
                self._check_joined(peer)
        elif t == "DIGEST":
            for reply in self.sync.on_digest(frame):
                self._send(peer, reply)
            if self._joining:
                self._digest_while_joining(peer, frame)
        elif t == "PULL":
            for reply in self.sync.on_pull(frame):
                self._send(peer, reply)

    def _apply_gossip(self, changes: list[SubChange | RouterRestarted]) -> None:
        engine = self.engine
        for change in changes:
            if isinstance(change, RouterRestarted):
                self._saw_incarnation(change.router, change.inc)
            elif change.kind == "added":
                self.sub_changes += 1
                sub = change.sub
                engine.handle(ev.RemoteSubscriberAdded(self._now, sub.router, sub.key,
                                                       sub.filter, sub.gen, sub.timeout, sub.qos,
                                                       sub.since))
                log.debug("router %s: knows subscriber %s@%s (filter %s)", self.me,
                          change.sub.key, change.sub.router, change.sub.filter)
            else:
                self.sub_changes += 1
                engine.handle(
                    ev.RemoteSubscriberRemoved(self._now, change.sub.router, change.sub.key))
                log.debug("router %s: forgot subscriber %s@%s", self.me, change.sub.key,
                          change.sub.router)

    def _saw_incarnation(self, router: str, inc: int) -> None:
        """A newer incarnation means the router restarted: what it owed us is gone, and so is
        the transfer state toward it."""
        known = self._known_inc.get(router)
        if known is not None and inc <= known:
            return
        self._known_inc[router] = inc
        if known is None:
            for item in self._waiting_inc.pop(router, ()):
                self._send_item([router], item, self._now)
            return
        log.info("router %s restarted (incarnation %s -> %s)", router, known, inc)
        self._flush_run()  # items queued before the restart belong to the old incarnation
        self._given_up.pop(router, None)
        self._owed_forgets.pop(router, None)  # its records died with it
        self._owed_verdicts.pop(router, None)  # and so did its publishers
        self.transfer.reset_destination(router, inc)
        self.engine.handle(ev.PeerLost(self._now, router,
                                       f"was on router {router}, which restarted", True))
        away = self.engine.away_from(router)
        if away:
            self._transmit([router], [AWAY, [list(entry) for entry in away]], self._now)
        if router in self._reached:  # back before we noticed it was gone: it knows nothing
            self._send_retained_to(router, self._now)

    # ------------------------------------------------------------------ routing

    def _route(self, frame: dict, now: float) -> None:
        """Deliver the part of a routed frame that is for us; forward the rest, one copy per
        next hop. No route: drop it, the sender retransmits."""
        if frame["t"] == "ACK":
            if frame["dst"] == self.me:
                self.transfer.on_ack(frame, now)
            else:
                hop = self.topology.next_hop(frame["dst"])
                if hop is not None:
                    self._send(hop, frame)
            return
        dests: dict[str, Any] = frame["dests"]
        if self.me in dests:
            self._saw_incarnation(frame["src"], frame["sinc"])
            mine = dict(frame, dests={self.me: dests[self.me]})
            for src, item in self.transfer.on_data(mine, now):
                self._consume(src, item, now)
        others = [d for d in dests if d != self.me]
        if others:
            by_hop, _unreachable = self.topology.split_by_next_hop(others)
            for hop, ds in by_hop.items():
                self._send(hop, dict(frame, dests={d: dests[d] for d in ds}))

    def _route_frames(self, frames: list[dict], now: float) -> None:
        for frame in frames:
            self._route(frame, now)

    def _consume(self, src: str, item: list, now: float) -> None:
        kind = item[0]
        engine = self.engine
        if kind == BATCH:
            for sub_item in item[1]:
                self._consume(src, sub_item, now)
        elif kind == MSG:
            _, msg_id, address, payload, mode, ttl_ms, _publisher, owed, resend = item[:9]
            presettled = len(item) > 9 and item[9] is True  # absent from older routers
            gens = item[10] if len(item) > 10 and isinstance(item[10], dict) else None
            once = len(item) <= 11 or item[11] != AT_LEAST_ONCE
            engine.handle(ev.RemoteMessage(now, src, msg_id, address, payload,
                                           owed.get(self.me, []), mode, ttl_ms, resend,
                                           presettled, gens, once))
        elif kind in (VERDICT, FORMER_VERDICT):
            _, msg_id, accepted, status, keys = item
            engine.handle(ev.PeerVerdict(now, src, msg_id, accepted, status, keys,
                                         kind == FORMER_VERDICT))
        elif kind == STORED:
            engine.handle(ev.PeerStored(now, src, item[1], item[2]))
        elif kind == FORGET:
            accepted = item[2] if len(item) > 2 else None
            description, info = (item[3], item[4]) if len(item) > 4 else ("", None)
            engine.handle(ev.RemoteForget(now, src, item[1], accepted, description, info))
        elif kind == AWAY:
            engine.handle(ev.AwayLearned(now, [tuple(e) for e in item[1]]))  # type: ignore[misc]
        elif kind == RETAIN and self.on_retained is not None:
            self.on_retained(src, item)

    # ------------------------------------------------------------------ retained (MQTT)

    def attach_retained(self, on_item: Callable[[str, list], Any],
                        source: Callable[[str, set[str]], list[list]]) -> None:
        """The MQTT edge's retained store registers here (router.ports.MeshPort):
        `on_item(src, item)` for an entry another router shares, `source(router, reachable)`
        for the entries to send a router that just became reachable."""
        self.on_retained = on_item
        self.retained_source = source

    def share_retained(self, item: list, now: float) -> None:
        """Send a retained message (or its clearing) of a local device to every reachable
        router. One that is not reachable now gets it when it becomes reachable."""
        self._transmit(sorted(self.topology.reachable()), item, now)

    def _send_retained_to(self, router: str, now: float) -> None:
        if self.retained_source is None:
            return
        for item in self.retained_source(router, self.topology.reachable()):
            self._transmit([router], item, now)

    # ------------------------------------------------------------------ engine actions

    def apply(self, action: MeshAction, now: float) -> None:
        if isinstance(action, Forward):
            item = [MSG, action.msg_id, action.address, action.payload, action.mode,
                    action.ttl_ms, action.publisher, action.owed, action.resend]
            if action.presettled or action.gens or not action.once:
                item.append(action.presettled)
            if action.gens or not action.once:
                item.append(action.gens)
            if not action.once:  # absent: exactly once (all an older router knows)
                item.append(AT_LEAST_ONCE)
            routers = [r for r in action.owed if r not in self._given_up]
            self._transmit(routers, item, now)
            for r in action.owed:
                if r in self._given_up:  # still away: its part fails at once
                    # (in doubt: this may be a second forward of a message that reached it
                    # before it was given up; test bed, ring with MQTT clients, seed 31)
                    self.engine.handle(ev.PeerLost(now, r, self._given_up[r]))
        elif isinstance(action, Verdict):
            item = [FORMER_VERDICT if action.former else VERDICT, action.msg_id,
                    action.accepted, action.status, action.keys]
            if action.origin in self._given_up:
                self._owed_verdicts.setdefault(action.origin, []).append(item)
            else:
                self._transmit([action.origin], item, now)
        elif isinstance(action, StoredAt):
            if action.origin not in self._given_up:  # (else the verdict will say it all)
                self._transmit([action.origin], [STORED, action.msg_id, action.keys], now)
        elif isinstance(action, Forget):
            routers = []
            for r in action.routers:
                if r in self._given_up:
                    self._owed_forgets.setdefault(r, set()).add(action.msg_id)
                else:
                    routers.append(r)
            item = [FORGET, action.msg_id, action.accepted]
            if action.accepted is False and action.info:  # who failed, for resends
                item += [action.description, action.info]
            self._transmit(routers, item, now)
        elif isinstance(action, Subscribed):
            if action.topic_filter is None:
                frame = self.gossip.local_detach(action.key)
            else:
                container, _, link = action.key.partition("/")
                frame = self.gossip.local_attach(action.key, action.topic_filter, container,
                                                 link, action.gen, action.timeout, action.qos,
                                                 action.since)
            if frame is not None:
                self._flood(frame)

    def _transmit(self, routers: list[str], item: list, now: float) -> None:
        """Queue an item for `routers`. Consecutive items for the same routers are batched;
        a change of destinations ends the run, so each destination gets items in order."""
        if not routers:
            return
        self._now = now
        for r in routers:
            if self.topology.next_hop(r) is None:
                # Owed to a router we cannot reach: its unreachable timeout runs from now.
                self._unreachable_since.setdefault(r, now)
        key = tuple(sorted(routers))
        if key != self._run_dests or len(self._run_items) >= MAX_BATCH:
            self._flush_run()
            self._run_dests = key
        self._run_items.append(item)

    def _flush_run(self) -> None:
        items, routers = self._run_items, self._run_dests
        if not items:
            return
        self._run_items = []
        self._run_dests = ()
        item = items[0] if len(items) == 1 else [BATCH, items]
        self._send_item(list(routers), item, self._now)

    def _send_item(self, routers: list[str], item: list, now: float) -> None:
        dests = {}
        for r in routers:
            inc = self._known_inc.get(r, self.topology.incarnation(r))
            if inc is not None:
                dests[r] = inc
            else:  # heard of only by gossip so far: wait until we know which incarnation
                self._waiting_inc.setdefault(r, []).append(item)
                self._unreachable_since.setdefault(r, now)
        if not dests:
            return
        frame = self.transfer.send(dests, item, now)
        if frame is not None:
            self._route(frame, now)

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> None:
        self._now = now
        if now >= self._next_digest:
            self._next_digest = now + self.gossip_interval
            digest = self.sync.digest()
            self._flood(digest)
        self._route_frames(self.transfer.tick(now), now)
        if self._join_deadline is not None and now >= self._join_deadline:
            self._join_timed_out(now)
        for router, since in sorted(self._unreachable_since.items()):
            if now >= since + self.unreachable_timeout:  # the same sum next_deadline gives
                del self._unreachable_since[router]
                self._give_up(router, now - since)

    def _give_up(self, router: str, waited: float) -> None:
        """`router` stayed unreachable for the timeout: what it owed us fails, and until it is
        reachable again new messages owed there fail at once."""
        self._flush_run()
        reason = (f"was on router {router}, unreachable for {self.unreachable_timeout:g} s")
        log.warning("router %s unreachable for %.1f s: failing what it owed", router, waited)
        self._given_up[router] = reason
        owed = self._owed_forgets.setdefault(router, set())
        verdicts = self._owed_verdicts.setdefault(router, [])
        handed_back = self.transfer.reset_destination(router, None)
        handed_back += self._waiting_inc.pop(router, [])
        for item in _flatten(handed_back):
            if item[0] in (MSG, FORGET):  # it may hold a record of that message: forget it
                owed.add(item[1])
            elif item[0] in (VERDICT, FORMER_VERDICT):  # its publisher may be waiting for it
                verdicts.append(item)
        self.engine.handle(ev.PeerLost(self._now, router, reason))

    def _welcome_back(self, router: str, now: float) -> None:
        """A given-up router is reachable again with the same incarnation: its channel resumes
        where it stopped, and it forgets the messages whose outcome we decided without it."""
        del self._given_up[router]
        log.info("router %s reachable again", router)
        for item in self._owed_verdicts.pop(router, ()):
            self._transmit([router], item, now)
        for msg_id in sorted(self._owed_forgets.pop(router, ())):
            self._transmit([router], [FORGET, msg_id], now)

    def next_deadline(self) -> float | None:
        deadlines = [self._next_digest]
        if self._join_deadline is not None:
            deadlines.append(self._join_deadline)
        t = self.transfer.next_deadline()
        if t is not None:
            deadlines.append(t)
        deadlines.extend(since + self.unreachable_timeout
                         for since in self._unreachable_since.values())
        return min(deadlines)


def _flatten(items: list[list]) -> list[list]:
    """Transfer items with batches opened up, in order."""
    out: list[list] = []
    for item in items:
        if item[0] == BATCH:
            out.extend(_flatten(item[1]))
        else:
            out.append(item)
    return out
