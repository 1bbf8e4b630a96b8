"""Every place the gate reaches into JAX internals, checked when installed and on restore."""
