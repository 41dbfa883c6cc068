"""Code that runs inside a simulator's own interpreter (``env.python``): standard library and
numpy only, never rlinf, torch or Ray. :mod:`.wire` is imported by both sides; :mod:`.server`
is the child's main program and ``*_backend.py`` the simulators' adapters it loads."""
