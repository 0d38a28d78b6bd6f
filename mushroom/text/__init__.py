"""Language-aware text tools shared by the detectors."""
