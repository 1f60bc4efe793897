"""What is decided before any byte moves: which GPU each rank runs on (placement), and
per message size how the work is cut (tuning)."""
