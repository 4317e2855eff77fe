"""Ratings from judgments: comparisons as rows (:mod:`.comparisons`), Bradley–Terry fits
(:mod:`.bradley_terry`, the exact penalized optimum; :mod:`.bradley_terry_published`, the
published scikit-learn lbfgs fit), the strengths' noise (:mod:`.noise`) and the label scales
that turn strengths into 0–5 labels (:mod:`.scales`)."""
