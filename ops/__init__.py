"""torch.library ops under the ``xg`` namespace (installed as ``gxg.ops``).

The per-step ops (fill, apply, accept, rollback, reset) arrive with the runtime issues; this
package exists now so that the layout fixed by the design card installs and imports.
"""
