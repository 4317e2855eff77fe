"""Ratings from judgments: comparisons as rows (:mod:`.comparisons`), Bradley–Terry fits
(:mod:`.bradley_terry`, the exact penalized optimum; :mod:`.bradley_terry_published`, the
published scikit-learn lbfgs fit) and label scales."""
