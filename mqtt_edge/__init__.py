"""MQTT 3.1.1 and 5.0 edge (grown by the MQTT issue)."""
