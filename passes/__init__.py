"""graphc compiler passes."""
