"""`fairway chaos`: the stack on private servers, each fault injected in turn under mixed load,
and a table of what the clients and the system saw (docs/chaos.md)."""
