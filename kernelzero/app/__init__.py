"""The application: the command line, services, the demo, bootstrap and the KernelBench bench; the only layer that imports stages, and nothing imports it."""
