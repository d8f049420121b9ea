"""The compiler: Grammar IR -> byte-level PDA -> adaptive token-mask cache (stages 2 and 3)."""
