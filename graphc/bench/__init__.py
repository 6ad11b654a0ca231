"""`graphc bench`: a benchdnn-compatible graph driver (knobs, batch files, correctness and performance modes)."""
