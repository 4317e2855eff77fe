"""Rating stage: from pairwise strengths to graded relevance labels."""
