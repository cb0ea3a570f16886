"""A discrete-event simulator that drives the real policy objects in simulated time."""
