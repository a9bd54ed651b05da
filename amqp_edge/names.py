"""Names the SDK and the router's AMQP edge share: protocol names, nothing else (it imports
nothing, so clients may use it; the "clients" contract in pyproject.toml)."""

# A client's reply link at its relay (amqp_edge/replies.py, amqp_edge/request.py): a receiver
# with this source address and this link name.
REPLIES_SOURCE = "$replies"
REPLIES_LINK = "replies"

# The addresses a router gives dynamic receivers (AMQP 3.5.3): DYNAMIC_PREFIX/ROUTER/HEX.
DYNAMIC_PREFIX = "_dynamic"

# A receiver joins a shared group (competing consumers, docs/amqp.md) with this link property,
# a string naming the group, or with a source address `$share/GROUP/FILTER` as in MQTT.
SHARED_GROUP = "exactmesh:shared-group"
