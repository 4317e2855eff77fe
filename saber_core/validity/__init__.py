"""How far a build's labels can be trusted: agreement, split-half reliability and bootstrap
intervals (:mod:`.reliability`), Swiss vs round robin (:mod:`.round_robin`), cheap-judge triage
(:mod:`.triage`), n-gram contamination (:mod:`.contamination`) and leaderboard stability
(:mod:`.leaderboard_stability`)."""
