"""What sees a transfer: the guard's log, the CPU detector, host callbacks, the user's line."""
