"""AMQP 1.0 edge: python-qpid-proton's engine driven from trio."""
