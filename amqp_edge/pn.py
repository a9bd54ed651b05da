"""The per-message path through proton's C engine, by its cffi module.

proton's Python object layer costs 80-165 us per message in a server (several wrapper objects
per delivery, an expensive `Delivery.update`); the same work through the C functions the
binding itself calls costs about a tenth of that. Every such call lives in this one module so
that the rest of the edge reads like ordinary code. `cproton_ffi` is internal to
python-qpid-proton, so pyproject.toml pins the version this was written against (0.40.0).

Control events (open, close, attach, detach) stay on proton's Python objects: they are rare
and need the richer API.
"""

from __future__ import annotations

from typing import Any

from cproton_ffi import ffi, lib  # type: ignore[import-not-found]

# Pointers are cffi cdata: hashable and equal by address, so they key dicts directly.
Ptr = Any

# Event types (pn_event_type_t) the edge dispatches on.
DELIVERY = lib.PN_DELIVERY
LINK_FLOW = lib.PN_LINK_FLOW

# Delivery states (AMQP outcomes, pn_delivery_state).
RECEIVED = lib.PN_RECEIVED
ACCEPTED = lib.PN_ACCEPTED
REJECTED = lib.PN_REJECTED
RELEASED = lib.PN_RELEASED
MODIFIED = lib.PN_MODIFIED

collector_peek = lib.pn_collector_peek
collector_pop = lib.pn_collector_pop
event_type = lib.pn_event_type
event_delivery = lib.pn_event_delivery
event_link = lib.pn_event_link
delivery_link = lib.pn_delivery_link
delivery_pending = lib.pn_delivery_pending
delivery_partial = lib.pn_delivery_partial
delivery_aborted = lib.pn_delivery_aborted
remote_settled = lib.pn_delivery_settled  # true once the peer settled
remote_state = lib.pn_delivery_remote_state
settle = lib.pn_delivery_settle
link_credit = lib.pn_link_credit
link_current = lib.pn_link_current
link_advance = lib.pn_link_advance
link_flow = lib.pn_link_flow
link_drain = lib.pn_link_get_drain
link_drained = lib.pn_link_drained
link_is_sender = lib.pn_link_is_sender
_update = lib.pn_delivery_update
_recv = lib.pn_link_recv
_send = lib.pn_link_send
_new_delivery = lib.pn_delivery
_tag = lib.pn_delivery_tag
_remote = lib.pn_delivery_remote
_is_undeliverable = lib.pn_disposition_is_undeliverable
_condition = lib.pn_disposition_condition
_condition_is_set = lib.pn_condition_is_set
_condition_name = lib.pn_condition_get_name
_condition_description = lib.pn_condition_get_description


def impl(wrapper: Any) -> Ptr:
    """The C pointer behind one of proton's Python objects."""
    return wrapper._impl


def tag(delivery: Ptr) -> bytes:
    t = _tag(delivery)
    return ffi.buffer(t.start, t.size)[:]


def receive(link: Ptr, size: int) -> bytes:
    """Read a whole delivery's `size` bytes off the link's current delivery."""
    buf = bytearray(size)
    got = _recv(link, ffi.from_buffer(buf), size)
    if got != size:
        raise RuntimeError(f"proton returned {got} of {size} bytes of a delivery")
    return bytes(buf)


def send(link: Ptr, delivery_tag: bytes, payload: bytes, presettled: bool) -> Ptr:
    """Create a delivery on a sender link, write the whole message and advance."""
    d = _new_delivery(link, (len(delivery_tag), ffi.from_buffer(delivery_tag)))
    _send(link, ffi.from_buffer(payload), len(payload))
    if presettled:
        settle(d)
    link_advance(link)
    return d


def accept(delivery: Ptr) -> None:
    """Set the local state to accepted, leaving the delivery unsettled for the peer to settle."""
    _update(delivery, ACCEPTED)


def received(delivery: Ptr) -> None:
    """Set the local state to received (AMQP 3.4.1: not an outcome), leaving it unsettled."""
    _update(delivery, RECEIVED)


def remote_undeliverable(delivery: Ptr) -> bool:
    return bool(_is_undeliverable(_remote(delivery)))


def remote_error(delivery: Ptr) -> str:
    """The error condition a peer put on its rejected outcome, as 'name: description'."""
    cond = _condition(_remote(delivery))
    if cond == ffi.NULL or not _condition_is_set(cond):
        return ""
    name = _condition_name(cond)
    desc = _condition_description(cond)
    name_s = ffi.string(name).decode(errors="replace") if name != ffi.NULL else ""
    desc_s = ffi.string(desc).decode(errors="replace") if desc != ffi.NULL else ""
    return f"{name_s}: {desc_s}" if desc_s else name_s
