"""The one way to run untrusted code (Proposer modules, Coder candidates): bubblewrap, self-confinement, a fork server; it bounds and contains, it does not judge.

- launcher.py: starts a process in bubblewrap (namespaces, read-only binds, one writable folder);
- workspace.py: that writable folder (a fresh scratch per request);
- confine.py, landlock.py, seccomp.py: what that process applies to itself before untrusted code exists in it;
- probe.py: what containment holds on this machine;
- forkserver.py: the long-lived server in the sandbox that runs each request in a fresh, confined fork;
- client.py: the host's end of a fork server, the one client of the evaluator's workers and the validator's server;
- untrusted_files.py: how the trusted side touches what untrusted code could have left (no link followed, bounded).

Its messages (the CONFINED and REFUSED lines, SandboxRefusal, ProbeReport) are schemas/messages.py's.

Containment is only as strong as the kernel's namespaces, Landlock and seccomp on this machine;
docs/evaluator.md (Containment) says what each mechanism holds back and what it does not.
"""
