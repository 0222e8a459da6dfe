"""Training and evaluation of the classifier (torch and scikit-learn live here, never in the analysis path)."""
