"""The worker's runtime: configuration, storage threads, the bus, dispatch and the CLI."""
