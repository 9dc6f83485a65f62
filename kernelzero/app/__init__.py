"""The application: the command line, services, `kernelzero run`, the demo, the experiment and the KernelBench bench; nothing imports it."""
