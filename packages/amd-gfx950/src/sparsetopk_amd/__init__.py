"""sparsetopk-amd-gfx950: exact top-k kernels in HIP for AMD Instinct gfx950
(MI355X) and gfx942 (MI300X), registered as the ``amd-gfx950`` backend.

Compiled for gfx950/gfx942; the same kernel source runs on NVIDIA through a
portability build (SPARSETOPK_AMD_PORTABILITY=cuda) and on a CPU emulator
(=emu); never run on AMD hardware so far. See notes/amd-gfx950.md.
"""

__version__ = "0.1.0"
