"""Each part's subcommands for the `tiermem` CLI, thin wrappers of one library call each."""
