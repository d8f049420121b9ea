"""Integrations of gxg with other libraries (each submodule imports its library on use).

``gxg.contrib.hf``: ``LogitsProcessor`` for transformers' ``model.generate``.
"""
