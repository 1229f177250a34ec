"""The primitive table, by family. Each module lists implementations with their VJP rules."""
