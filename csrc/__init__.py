"""CUDA C++ sources of gxg, compiled at run time (NVRTC); installed as gxg.csrc."""
