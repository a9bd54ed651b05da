"""Reliable transfer between routers, as a sans-IO state machine (docs/mesh-protocol.md).

Between each ordered pair (origin, destination) there is a logical channel with sequence numbers
from 1. It sits above TCP and is independent of the path, so a dropped connection, a restarted
intermediate router or a change of route loses and duplicates nothing: the sender keeps every
item until the destination acknowledges it cumulatively, and the receiver consumes items strictly
in sequence order, once.

Frames are plain dicts (`"t"` names the type); encoding them and routing them by next hop is
someone else's job. Nothing here reads a clock or touches a socket: time arrives as `now`
(seconds, monotonic), so a test can drive many endpoints deterministically.

Decisions the protocol page leaves open, made here:

- Incarnations only grow. A DATA frame whose `sinc` is *lower* than the one we hold for that
  source is a late frame from a dead incarnation and is dropped; a higher one resets the state.
- The window counts items sent and not yet acknowledged on one channel; items over it wait in a
  queue and take their sequence number only when they go out, so sequence numbers on the wire
  never run past what the receiver will buffer (it accepts `delivered + window`).
- A channel is only ever restarted at seq 1 toward an incarnation it has not used. Giving a
  destination up (`reset_destination(dst, None)`, e.g. unreachable too long) while it lives on
  keeps its receive state for us, so seq 1 again would be taken for a duplicate (dropped *and*
  acknowledged: silent loss). Instead the channel is parked: its items are handed back and
  freed, and if a later `send()` names the same incarnation the channel resumes where it was,
  first filling the sequence numbers of the handed-back items with GAP items, which the
  receiving Transfer consumes silently. So a handed-back item is never consumed later unless a
  copy of it was already under way (the ambiguity every reset has: the caller decides).
- `send()` toward another incarnation than a channel in use raises ValueError: only
  `reset_destination()` may drop a channel, because only it can hand the items back.
- Backoff doubles a channel's RTO at most once per generation of timeouts (an item sent before
  the last doubling does not double it again), so a full window timing out at once backs off
  by one step, not by `window` steps. A valid RTT sample recomputes the RTO (RFC 6298 5.7).
- Karn's rule with cumulative ACKs: an ACK yields a sample (from the newest item it covers) only
  if none of the items it newly covers was ever retransmitted, since a retransmission that fills
  a gap can trigger the ACK of later items and inflate their apparent round trip.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Any

Frame = dict[str, Any]

# Stands in for a handed-back item when a parked channel resumes (see above). Not one of the
# engine's item kinds, and never returned by on_data().
GAP: list = ["gap"]


class _Pending:
    """One item sent on a channel and not yet acknowledged."""

    __slots__ = ("due", "item", "retransmitted", "sent_at")

    def __init__(self, item: list, sent_at: float, due: float) -> None:
        self.item = item
        self.sent_at = sent_at  # time of the latest transmission
        self.due = due  # retransmit when now >= due
        self.retransmitted = False  # Karn: no RTT sample from this item any more


class _OutChannel:
    """Sender side of one (me -> dst) channel."""

    __slots__ = (
        "acked",
        "backoff_mark",
        "dinc",
        "hole_end",
        "next_seq",
        "queue",
        "rto",
        "rttvar",
        "srtt",
        "unacked",
    )

    def __init__(self, dinc: int, rto: float) -> None:
        self.dinc = dinc
        self.next_seq = 1
        self.acked = 0  # highest cumulative ACK
        # seq -> pending, in seq order; cumulative ACKs always remove a prefix
        self.unacked: dict[int, _Pending] = {}
        # (send id, item) waiting for window room; the send id groups one send() across dests
        self.queue: deque[tuple[int, list]] = deque()
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.rto = rto
        self.backoff_mark = float("-inf")  # when the RTO was last doubled
        self.hole_end = 0  # on a resumed channel: the last number its GAPs fill


class _InChannel:
    """Receiver side of one (src -> me) channel."""

    __slots__ = ("buffer", "delivered", "sinc")

    def __init__(self, sinc: int) -> None:
        self.sinc = sinc
        self.delivered = 0  # highest seq consumed; everything up to it was consumed in order
        self.buffer: dict[int, list] = {}  # out-of-order items, seq -> item


class Transfer:
    """Both ends of every reliable channel of one router (`me`, incarnation `inc`)."""

    def __init__(
        self,
        me: str,
        inc: int,
        *,
        window: int = 4096,
        min_rto: float = 0.2,
        max_rto: float = 3.0,
        ack_delay: float = 0.005,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        if not 0 < min_rto <= max_rto:
            raise ValueError("need 0 < min_rto <= max_rto")
        self.me = me
        self.inc = inc
        self.window = window
        self.min_rto = min_rto
        self.max_rto = max_rto
        self.ack_delay = ack_delay
        # RFC 6298 says 1 s before any sample; min_rto*5 is that with the default min_rto and
        # scales down with it, so a deployment (or a test) with a fast network is not stuck at 1 s.
        self.initial_rto = self._clamp(min_rto * 5)
        self._out: dict[str, _OutChannel] = {}
        # dst -> (dinc, acked, next_seq) of its last channel given up while that incarnation may
        # live on: where a later channel toward the same incarnation must resume
        self._parked: dict[str, tuple[int, int, int]] = {}
        # retransmission timers: (due, tiebreak, dst, channel, seq). Entries go stale when the
        # item is acknowledged or the channel reset; they are skipped when they surface.
        self._timers: list[tuple[float, int, str, _OutChannel, int]] = []
        self._tie = itertools.count()
        self._send_ids = itertools.count(1)
        self.retransmissions: dict[str, int] = {}  # items sent again, by destination
        self._ready: dict[str, float] = {}  # dst -> when its queue got window room
        self._in: dict[str, _InChannel] = {}
        self._ack_due: dict[str, float] = {}  # src -> when its ACK must go out

    # ------------------------------------------------------------------ sending

    def send(self, dests: dict[str, int], item: list, now: float) -> Frame | None:
        """Send `item` to every destination (router -> its incarnation as we know it).

        Returns one DATA frame for the destinations whose window has room, or None; the others
        queue the item and get it from a later `tick()`. Raises ValueError (having changed
        nothing) when an incarnation differs from that of a channel in use.
        """
        for dst, dinc in dests.items():  # all of them before touching any channel
            ch = self._out.get(dst)
            if ch is not None and ch.dinc != dinc:
                raise ValueError(
                    f"{dst} has incarnation {ch.dinc} here, not {dinc}: reset_destination first"
                )
        channels: list[tuple[str, _OutChannel]] = []
        for dst, dinc in dests.items():
            ch = self._out.get(dst)
            channels.append((dst, ch if ch is not None else self._open(dst, dinc, now)))
        send_id = next(self._send_ids)
        out: dict[str, list[int]] = {}
        for dst, ch in channels:
            # Behind a non-empty queue even with room: the item must not overtake earlier ones.
            if ch.queue or len(ch.unacked) >= self.window:
                ch.queue.append((send_id, item))
            else:
                out[dst] = [ch.dinc, self._dispatch(dst, ch, item, now)]
        if not out:
            return None
        return self._data(out, item)

    def on_ack(self, frame: Frame, now: float) -> None:
        """An ACK addressed to us: drop what it covers, take an RTT sample if Karn allows."""
        if frame["dst"] != self.me or frame["dinc"] != self.inc:
            return  # meant for an earlier incarnation of us
        dst = frame["src"]
        ch = self._out.get(dst)
        # An ACK from another incarnation of the receiver than the channel's speaks of a
        # different sequence space (typically a late ACK from before its restart).
        if ch is None or frame["sinc"] != ch.dinc:
            return
        upto = min(frame["upto"], ch.next_seq - 1)  # never acknowledge what was not sent
        if upto <= ch.acked:
            return  # an old or repeated ACK: no new data, no sample (RFC 6298)
        newest = ch.unacked[upto]
        clean = True
        for seq in range(ch.acked + 1, upto + 1):
            if ch.unacked.pop(seq).retransmitted:
                clean = False
        ch.acked = upto
        if clean:
            self._sample(ch, now - newest.sent_at)
        if ch.queue:
            self._ready.setdefault(dst, now)  # the window opened: tick() sends the queue

    def reset_destination(self, dst: str, new_inc: int | None) -> list[list]:
        """Drop the channel to `dst` and hand back its unacknowledged items, in send order.

        `new_inc` is the incarnation the destination restarted with, or None when it is given
        up. The items handed back include any the old incarnation consumed but whose ACK did not
        arrive: whether to send them again is the caller's decision. A later `send()` toward a
        new incarnation starts at seq 1; toward the same one it resumes (see the module notes).
        """
        ch = self._out.pop(dst, None)
        if ch is None:
            return []
        self._ready.pop(dst, None)
        items = [p.item for p in ch.unacked.values() if p.item is not GAP]
        items += [item for _, item in ch.queue if item is not GAP]
        if new_inc is None or new_inc == ch.dinc:
            # it may live on with its receive state for us: remember where the channel was
            # (GAPs still queued have no number yet, but their numbers are taken all the same)
            self._parked[dst] = (ch.dinc, ch.acked, max(ch.next_seq, ch.hole_end + 1))
        else:
            self._parked.pop(dst, None)  # that incarnation is gone, and with it its state
        return items

    def route_restored(self, dst: str, now: float) -> None:
        """A route to `dst` exists again after none did: retransmit what it has not
        acknowledged at the next `tick()`, rather than when the backed-off RTO says (up to
        `max_rto` later), and forget the backoff, which measured the outage and not the path.
        The RTO goes back to what the round-trip samples give (or the initial one)."""
        ch = self._out.get(dst)
        if ch is None:
            return
        ch.rto = self._clamp(ch.srtt + 4 * ch.rttvar) if ch.srtt is not None else self.initial_rto
        ch.backoff_mark = now  # these retransmissions must not double it again
        for seq, p in ch.unacked.items():
            p.due = now  # re-armed: the timer already queued for it is stale from now on
            heapq.heappush(self._timers, (now, next(self._tie), dst, ch, seq))

    # ------------------------------------------------------------------ receiving

    def on_data(self, frame: Frame, now: float) -> list[tuple[str, list]]:
        """A DATA frame for us: the (src, item) pairs now consumable, in sequence order."""
        entry = frame["dests"].get(self.me)
        if entry is None:
            return []
        dinc, seq = entry
        if dinc != self.inc:
            return []  # sent to an earlier incarnation of us
        src, sinc = frame["src"], frame["sinc"]
        st = self._in.get(src)
        if st is None or sinc > st.sinc:
            # The source restarted: its sequence starts again at 1 and whatever we buffered
            # from the old incarnation can never be completed.
            st = self._in[src] = _InChannel(sinc)
            self._ack_due.pop(src, None)
        elif sinc < st.sinc:
            return []  # late frame from a dead incarnation of the source
        if seq <= st.delivered or seq in st.buffer or seq > st.delivered + self.window:
            # A duplicate means our ACK was lost or slow; over the window means the sender
            # misjudged us. Either way, tell it where we are at once.
            self._ack_due[src] = now
            return []
        if seq != st.delivered + 1:
            st.buffer[seq] = frame["item"]
            self._ack_due[src] = now  # a gap: let the sender know at once
            return []
        item = frame["item"]
        out = [] if item == GAP else [(src, item)]
        st.delivered = seq
        while st.delivered + 1 in st.buffer:
            st.delivered += 1
            item = st.buffer.pop(st.delivered)
            if item != GAP:
                out.append((src, item))
        if st.buffer:
            self._ack_due[src] = now  # a gap remains behind what we just consumed
        else:
            # Delay the ACK so a burst is acknowledged by one frame, but never postpone one
            # already due: a steady stream must still be acknowledged every ack_delay.
            due = now + self.ack_delay
            self._ack_due[src] = min(self._ack_due.get(src, due), due)
        return out

    def channels(self) -> dict[str, tuple[float | None, int, int]]:
        """Per destination: (smoothed round-trip time in seconds or None before a sample,
        items sent and not acknowledged, items waiting for window room)."""
        return {dst: (ch.srtt, len(ch.unacked), len(ch.queue)) for dst, ch in self._out.items()}

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> list[Frame]:
        """The frames due at `now`: ACKs, retransmissions, then queued items that now fit."""
        frames: list[Frame] = []
        if self._ack_due:
            for src in [s for s, due in self._ack_due.items() if due <= now]:
                del self._ack_due[src]
                st = self._in[src]
                frames.append(
                    {
                        "t": "ACK",
                        "src": self.me,
                        "sinc": self.inc,
                        "dst": src,
                        "dinc": st.sinc,
                        "upto": st.delivered,
                    }
                )
        while self._timers and self._timers[0][0] <= now:
            entry = heapq.heappop(self._timers)
            if self._stale(entry):
                continue
            _, _, dst, ch, seq = entry
            p = ch.unacked[seq]
            if p.sent_at >= ch.backoff_mark:
                ch.rto = min(ch.rto * 2, self.max_rto)
                ch.backoff_mark = now
            p.retransmitted = True
            self.retransmissions[dst] = self.retransmissions.get(dst, 0) + 1
            p.sent_at = now
            p.due = now + ch.rto
            heapq.heappush(self._timers, (p.due, next(self._tie), dst, ch, seq))
            # To that destination alone: the others may well have it already.
            frames.append(self._data({dst: [ch.dinc, seq]}, p.item))
        if self._ready:
            frames.extend(self._flush_queues(now))
        return frames

    def next_deadline(self) -> float | None:
        """When `tick()` next has something to do (possibly already past), or None."""
        while self._timers and self._stale(self._timers[0]):
            heapq.heappop(self._timers)
        times = []
        if self._ack_due:
            times.append(min(self._ack_due.values()))
        if self._timers:
            times.append(self._timers[0][0])
        if self._ready:
            times.append(min(self._ready.values()))
        return min(times) if times else None

    def unacked(self, dst: str) -> int:
        """Items toward `dst` not yet acknowledged, queued ones (and pending GAPs) included."""
        ch = self._out.get(dst)
        return 0 if ch is None else len(ch.unacked) + len(ch.queue)

    def in_flight(self) -> int:
        """All items held for retransmission or queued (GAPs too), counted once per channel."""
        return sum(len(ch.unacked) + len(ch.queue) for ch in self._out.values())

    # ------------------------------------------------------------------ internals

    def _open(self, dst: str, dinc: int, now: float) -> _OutChannel:
        """A new channel toward `dst`: at seq 1, or where a parked one toward `dinc` stopped."""
        ch = self._out[dst] = _OutChannel(dinc, self.initial_rto)
        parked = self._parked.pop(dst, None)
        if parked is not None and parked[0] == dinc:
            _, acked, next_seq = parked
            ch.acked = acked
            ch.next_seq = acked + 1
            ch.hole_end = next_seq - 1
            # The receiver may hold anything up to next_seq - 1 and will consume nothing after
            # a hole: fill the numbers of the handed-back items, ahead of anything new.
            ch.queue.extend((next(self._send_ids), GAP) for _ in range(next_seq - 1 - acked))
            if ch.queue:
                self._ready[dst] = now
        return ch

    def _dispatch(self, dst: str, ch: _OutChannel, item: list, now: float) -> int:
        """Give `item` the channel's next sequence number and start its retransmission timer."""
        seq = ch.next_seq
        ch.next_seq += 1
        p = ch.unacked[seq] = _Pending(item, now, now + ch.rto)
        heapq.heappush(self._timers, (p.due, next(self._tie), dst, ch, seq))
        return seq

    def _flush_queues(self, now: float) -> list[Frame]:
        # One frame per original send() across the destinations flushed together, so fan-out
        # stays one copy per next hop; ordering by send id keeps every channel in seq order.
        by_send: dict[int, tuple[list, dict[str, list[int]]]] = {}
        for dst in list(self._ready):
            ch = self._out.get(dst)
            del self._ready[dst]
            if ch is None:
                continue
            while ch.queue and len(ch.unacked) < self.window:
                send_id, item = ch.queue.popleft()
                seq = self._dispatch(dst, ch, item, now)
                by_send.setdefault(send_id, (item, {}))[1][dst] = [ch.dinc, seq]
        return [self._data(dests, item) for _, (item, dests) in sorted(by_send.items())]

    def _stale(self, entry: tuple[float, int, str, _OutChannel, int]) -> bool:
        due, _, dst, ch, seq = entry
        if self._out.get(dst) is not ch:
            return True  # the channel was reset
        p = ch.unacked.get(seq)
        return p is None or p.due != due  # acknowledged, or re-armed by a retransmission

    def _sample(self, ch: _OutChannel, rtt: float) -> None:
        """RFC 6298 section 2, with alpha 1/8 and beta 1/4."""
        rtt = max(rtt, 0.0)
        if ch.srtt is None:
            ch.srtt = rtt
            ch.rttvar = rtt / 2
        else:
            ch.rttvar = 0.75 * ch.rttvar + 0.25 * abs(ch.srtt - rtt)
            ch.srtt = 0.875 * ch.srtt + 0.125 * rtt
        ch.rto = self._clamp(ch.srtt + 4 * ch.rttvar)

    def _clamp(self, rto: float) -> float:
        return min(max(rto, self.min_rto), self.max_rto)

    def _data(self, dests: dict[str, list[int]], item: list) -> Frame:
        return {"t": "DATA", "src": self.me, "sinc": self.inc, "dests": dests, "item": item}
