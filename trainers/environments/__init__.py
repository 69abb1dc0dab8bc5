"""The terminal-task environments, importable without torch: tasks and suites, the sandbox, verifiers,
canaries and the safety reading of an attempt's system calls."""
