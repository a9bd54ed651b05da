"""Everything between routers: peer links, topology, gossip (grown by the mesh issue)."""
