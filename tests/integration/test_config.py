"""The build config and its resolved plan: every flat name of earlier releases still works, every
option has one home, presets fill only what the user left empty, and contradicting settings are
errors naming both keys."""

from __future__ import annotations

import json

import pytest

from saber_config import PlanError, flat_names, load_build_config
from saber_config.loading import LEGACY_FLAT
from saber_config.reads import MISSING, PlanReads, unwrap, values_at

# Every flat name of the release before the plan (94 names), a value to set it to, and where
# that value must land: a config path, or a plan path for names that moved (legacy names).
EARLIER_FLAT_NAMES = {
    "adaptive_draws": ("50", "tournament.adaptive_draws", 50),
    "adaptive_min_weight": ("0.05", "tournament.adaptive_min_weight", 0.05),
    "adaptive_stop_ndcg": ("0.8", "tournament.adaptive_stop_ndcg", 0.8),
    "adaptive_warmup": ("2", "tournament.adaptive_warmup", 2),
    "allpairs_checkpoint_seconds": ("5", "allpairs.checkpoint_seconds", 5.0),
    "allpairs_shard_cpus": ("4", "allpairs.shard_cpus", 4),
    "allpairs_shard_mem": ("8G", "allpairs.shard_mem", "8G"),
    "allpairs_shard_partition": ("cpu", "allpairs.shard_partition", "cpu"),
    "allpairs_shard_time": ("01:00:00", "allpairs.shard_time", "01:00:00"),
    "allpairs_shards": ("8", "allpairs.shards", 8),
    "allpairs_units": ("16", "allpairs.units", 16),
    "allpairs_workers": ("1", "allpairs.workers", 1),
    "audit_fixes": ("sit_outs,bt_exact", "construction.audit_fixes", ["sit_outs", "bt_exact"]),
    "audit_queries": ("7", "construction.audit_queries", 7),
    "bma": ("pooled", "construction.bma", "pooled"),
    "bt": ("sklearn_lbfgs", "rating.fit", "sklearn_lbfgs"),
    "bt_c": ("0.5", "rating.c", 0.5),
    "bt_soft": ("true", "rating.soft", True),
    "contam_ngram": ("6", "validity.contam_ngram", 6),
    "contam_threshold": ("0.5", "validity.contam_threshold", 0.5),
    "contamination_corpus": ("/x.jsonl", "validity.contamination_corpus", "/x.jsonl"),
    "corpus": ("/c.jsonl", "inputs.corpus", "/c.jsonl"),
    "corpus_limit": ("24", "inputs.corpus_limit", 24),
    "domain_map": ('{"Algebra": "Algebra"}', "construction.domain_map", {"Algebra": "Algebra"}),
    "domain_quotas": ('{"Algebra": 3}', "construction.domain_quotas", {"Algebra": 3}),
    "domains": ("multi_label", "construction.domains", "multi_label"),
    "execution": ("slurm", "execution", "slurm"),
    "group_choice": ("random_sample", "construction.group_choice", "random_sample"),
    "home": ("/tmp/h", None, None),  # SABER_HOME is the home, as before
    "ic": ("corpus_frequency", "construction.ic", "corpus_frequency"),
    "judge": ("llm", "tournament.judge", "llm"),
    "judge_both_orders": ("false", "plan:tournament.presentation", "pool_order"),
    "judge_max_tokens": ("64", "tournament.judge_max_tokens", 64),
    "judge_mode": ("generate", "tournament.judge_mode", "generate"),
    "llm_backend": ("vllm", "llm.backend", "vllm"),
    "llm_base_url": ("http://h/v1", "llm.base_url", "http://h/v1"),
    "llm_max_concurrency": ("3", "llm.max_concurrency", 3),
    "llm_model": ("m", "llm.model", "m"),
    "llm_reasoning_effort": ("high", "llm.reasoning_effort", "high"),
    "llm_tensor_parallel": ("2", "llm.tensor_parallel", 2),
    "max_text_chars": ("1000", "inputs.max_text_chars", 1000),
    "max_topics": ("3", "annotation.max_topics", 3),
    "method": ("sabermath", "method", "sabermath"),
    "n_both": ("5", "pools.n_both", 5),
    "n_queries": ("9", "pools.n_queries", 9),
    "n_summary_only": ("6", "pools.n_summary_only", 6),
    "n_topic_only": ("7", "pools.n_topic_only", 7),
    "near_duplicate_cut": ("0.7", "pools.near_duplicate_cut", 0.7),
    "near_duplicates": ("keep", "construction.near_duplicates", "keep"),
    "neighbours_kept": ("12", "pools.neighbours_kept", 12),
    "ontology": ("/o.csv", "inputs.ontology", "/o.csv"),
    "ontology_source": ("tag_paths", "construction.ontology_source", "tag_paths"),
    "pairing": ("information", "tournament.pairing", "information"),
    "pool_fallback": ("skip", "pools.fallback", "skip"),
    "precision": ("float16", "construction.precision", "float16"),
    "presentation": ("seeded_random", "tournament.presentation", "seeded_random"),
    "profile": ("tiny", None, None),  # SABER_PROFILE chooses the profile, as before
    "rebuild_cron": ("0 3 * * 1", "automation.rebuild_cron", "0 3 * * 1"),
    "recipe_queries": ("4", "validity.recipe_queries", 4),
    "recipe_summaries": ("none", "validity.recipe_summaries", "none"),
    "rounds": ("5", "tournament.rounds", 5),
    "sabermath_fixes": ("sit_outs", "construction.fixes", ["sit_outs"]),
    "seed": ("7", "seed", 7),
    "slurm_account": ("acct", "slurm.account", "acct"),
    "slurm_gpus_per_node": ("2", "slurm.gpus_per_node", 2),
    "slurm_max_retries": ("1", "slurm.max_retries", 1),
    "slurm_mode": ("per_shard", "slurm.mode", "per_shard"),
    "slurm_orphan_poll_seconds": ("30", "slurm.orphan_poll_seconds", 30),
    "slurm_partition": ("gpu", "slurm.partition", "gpu"),
    "slurm_profile": ("dev", "slurm.profile", "dev"),
    "slurm_shard_size": ("64", "slurm.shard_size", 64),
    "slurm_time_limit": ("01:00:00", "slurm.time_limit", "01:00:00"),
    "summaries": ("llm", "annotation.summaries", "llm"),
    "summary_high": ("0.95", "thresholds.summary_high", 0.95),
    "summary_low": ("0.4", "thresholds.summary_low", 0.4),
    "summary_max_tokens": ("40", "annotation.summary_max_tokens", 40),
    "swiss": ("published", "plan:tournament.pairing", "published_swiss"),
    "swiss_seed": ("5", "plan:tournament.seed", 5),
    "synth_scale": ("0.1", "inputs.synth_scale", 0.1),
    "tag_cleanup": ("published", "construction.tag_cleanup", "published"),
    "targets": ("eligible_rows", "plan:thresholds.mode", "global_percentile"),
    "threshold_mode": ("absolute", "thresholds.mode", "absolute"),
    "threshold_quantile": ("0.95", "thresholds.quantile", 0.95),
    "thresholds": ("global_percentile", "plan:thresholds.mode", "global_percentile"),
    "tokenizer": ("sabermath", "construction.tokenizer", "sabermath"),
    "topic_high": ("0.85", "thresholds.topic_high", 0.85),
    "topic_low": ("0.3", "thresholds.topic_low", 0.3),
    "topic_shortlist": ("6", "annotation.topic_shortlist", 6),
    "topics": ("llm", "annotation.topics", "llm"),
    "topics_max_tokens": ("20", "annotation.topics_max_tokens", 20),
    "validity_bootstrap": ("50", "validity.bootstrap", 50),
    "validity_rr_queries": ("1", "validity.rr_queries", 1),
    "watch_inputs": ("true", "automation.watch_inputs", True),
    "watch_interval_seconds": ("30", "automation.watch_interval_seconds", 30),
}
SABERMATH_STEPS = {  # steps the per-query engine cannot run: set with the all-pairs ones
    "thresholds",
    "targets",
    "swiss",
    "bma",
    "ic",
    "precision",
    "tokenizer",
    "group_choice",
    "domains",
}


def _at(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("SABER_") and key not in ("SABER_HOME",):
            monkeypatch.delenv(key)
    return monkeypatch


def test_the_list_covers_every_name_of_the_earlier_release():
    assert len(EARLIER_FLAT_NAMES) == 94
    today = set(flat_names()) | set(LEGACY_FLAT)
    assert set(EARLIER_FLAT_NAMES) <= today


@pytest.mark.parametrize("name", sorted(EARLIER_FLAT_NAMES))
def test_every_earlier_flat_name_still_sets_its_option(name, clean_env):
    value, where, expected = EARLIER_FLAT_NAMES[name]
    if where is None:
        return  # profile and home keep their own variables (tested by every build)
    clean_env.setenv(f"SABER_{name.upper()}", value)
    if name in SABERMATH_STEPS or name in ("ontology_source", "tag_cleanup"):
        clean_env.setenv("SABER_METHOD", "sabermath")
    if name in ("sabermath_fixes", "swiss_seed"):
        clean_env.setenv("SABER_METHOD", "sabermath")
    if name == "presentation":
        clean_env.setenv("SABER_JUDGE", "llm")
    build = load_build_config("default")
    if where.startswith("plan:"):
        assert _at(build.plan(), where[5:]) == expected
    else:
        assert _at(build, where) == expected
        assert build.explicit[where] == f"env SABER_{name.upper()}"


def test_sabermath_adaptive_pairing_names_both_keys(clean_env, tmp_path):
    """The issue's case: SABER_PAIRING=adaptive against a profile's construction.swiss."""
    profile = tmp_path / "mine.yaml"
    profile.write_text("method: sabermath\nconstruction: {swiss: published}\n")
    clean_env.setenv("SABER_PAIRING", "adaptive")
    with pytest.raises(PlanError) as err:
        load_build_config(str(profile))
    message = str(err.value)
    assert "tournament.pairing = 'adaptive' (env SABER_PAIRING)" in message
    assert f"construction.swiss = 'published' (profile {profile})" in message


@pytest.mark.parametrize(
    ("settings", "keys"),
    [
        ({"method": "sabermath", "pairing": "swiss", "sabermath_fixes": ["sit_outs"]},
         ("construction.fixes", "tournament.pairing")),
        ({"method": "sabermath", "sabermath_fixes": ["presentation"],
          "presentation": "pool_order"}, ("construction.fixes", "tournament.presentation")),
        ({"method": "sabermath", "sabermath_fixes": ["bt_exact"], "bt": "sklearn_lbfgs"},
         ("construction.fixes", "rating.fit")),
        ({"presentation": "both_orders"}, ("tournament.presentation", "tournament.judge")),
        ({"judge": "llm", "pairing": "published_swiss", "presentation": "both_orders"},
         ("tournament.presentation", "tournament.pairing")),
        ({"query_draw": "stable", "threshold_mode": "global_percentile"},
         ("pools.query_draw", "thresholds.mode")),
    ],
)  # fmt: skip
def test_contradicting_settings_are_errors_naming_both(settings, keys, clean_env):
    with pytest.raises(PlanError) as err:
        load_build_config("default", **settings).plan()
    message = str(err.value)
    assert f"{keys[0]} (override) conflicts with {keys[1]} (" in message  # origins named too


def test_legacy_and_new_names_agreeing_is_fine(clean_env):
    build = load_build_config("default", judge="llm", judge_both_orders=False,
                              presentation="seeded_random")  # fmt: skip
    assert build.plan().tournament.presentation == "seeded_random"
    with pytest.raises(PlanError, match="judge_both_orders"):
        load_build_config("default", judge="llm", judge_both_orders=True, presentation="pool_order")


def test_presets_fill_only_what_is_left_empty(clean_env):
    paper = load_build_config("paper").plan()
    assert (paper.engine, paper.tournament.pairing, paper.tournament.seed) == (
        "all_pairs", "published_swiss", 42)  # fmt: skip
    assert paper.rating.fit == "sklearn_lbfgs" and paper.tournament.presentation == "pool_order"
    assert paper.construction.pairing == "published_swiss"
    assert paper.construction.bt == "sklearn_lbfgs"
    fixed = load_build_config("paper", sabermath_fixes=["presentation", "bt_exact"]).plan()
    assert fixed.tournament.presentation == "seeded_random" and fixed.rating.fit == "exact"
    assert fixed.construction.fixes == ("presentation",)  # bt_exact is now rating.fit: exact
    assert fixed.tournament.rules.presentation and fixed.tournament.rules.strategy == "published"
    default = load_build_config("default").plan()
    assert (default.engine, default.tournament.pairing, default.rating.fit) == (
        "per_query", "swiss", "exact")  # fmt: skip
    assert default.tournament.presentation == "pool_order"  # the embedding judge answers once
    llm = load_build_config("default", judge="llm").plan()
    assert llm.tournament.presentation == "both_orders" and llm.tournament.calls_per_judgment == 2
    seeded = load_build_config("default", seed=9).plan()
    assert seeded.tournament.seed == 9  # the seed policy: the build's seed off published Swiss
    assert load_build_config("paper", seed=9).plan().tournament.seed == 42


def test_round_rules_carry_only_what_decides_the_pairs(clean_env):
    """Swiss pairs do not depend on the refit settings; information pairing's do."""
    swiss = load_build_config("default").plan().tournament.rules
    assert load_build_config("default", bt_soft=True, bt_c=0.3).plan().tournament.rules == swiss
    info = load_build_config("default", pairing="information").plan().tournament.rules
    soft = load_build_config("default", pairing="information", bt_soft=True).plan()
    assert soft.tournament.rules != info and soft.tournament.rules.soft


def test_reads_record_what_a_stage_reads_and_are_looked_up_later(clean_env):
    plan = load_build_config("default").plan()
    reads = PlanReads(plan)
    assert reads.tournament.rounds == 8
    assert reads.engine == "per_query"  # a property records what it reads
    assert not reads.construction.has_fix("sit_outs")  # so does a method
    steps = unwrap(reads.construction)  # handed over whole: recorded whole
    assert set(reads.reads) == {
        "tournament.rounds",
        "thresholds.mode",  # read by the property engine ...
        "thresholds.engine",  # ... whose results are recorded too
        "engine",
        "construction.fixes",  # read by the method has_fix ...
        "construction.has_fix('sit_outs',)",  # ... whose result is recorded too
        "construction",
    }
    assert reads.reads["construction"]["tokenizer"] == steps.tokenizer == "platform"
    assert values_at(plan, reads.reads) == reads.reads
    later = load_build_config("default", rounds=10).plan()
    assert values_at(later, ["tournament.rounds"]) == {"tournament.rounds": 10}
    assert values_at(later, ["tournament.gone"]) == {"tournament.gone": MISSING}
    json.dumps(reads.reads)
    with pytest.raises(AttributeError, match="no setting 'roundz'"):
        reads.tournament.roundz  # noqa: B018


def test_a_new_option_of_a_section_is_in_the_plan_unedited(clean_env):
    """Resolved sections keep the written section: an option added to ``RatingSettings`` (or
    any section) reaches the plan and the reads without an edit of the plan."""
    plan = load_build_config("default", bt_c=0.25).plan()
    reads = PlanReads(plan)
    assert reads.rating.c == 0.25 and reads.reads == {"rating.c": 0.25}


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["plan"], "plan"),
        (["lineage", "--query", "q"], "lineage"),
        (["judge", "probe"], "judge probe"),
    ],
)
def test_a_subcommand_with_conflicting_settings_says_so_in_one_line(
    argv, command, tmp_path, monkeypatch
):
    """Not a traceback: ``saber <command>: <the conflict, naming both keys and their origins>``."""
    from saber_cli.main import main

    profile = tmp_path / "published.yaml"
    profile.write_text("construction:\n  swiss: published\n")
    monkeypatch.setenv("SABER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SABER_PROFILE", str(profile))
    monkeypatch.setenv("SABER_PAIRING", "adaptive")
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    message = str(exit_.value.code)
    assert message.startswith(f"saber {command}: tournament.pairing = 'adaptive'")
    assert "(env SABER_PAIRING)" in message and f"(profile {profile})" in message
    assert "construction.swiss = 'published'" in message and "\n" not in message


def test_the_config_speaks_the_presets_vocabulary():
    """The settings a preset fills take exactly the words of its table (``CHOICES``)."""
    import typing

    from saber_config.schema import (
        BuildConfig,
        RatingSettings,
        ThresholdSettings,
        TournamentSettings,
    )
    from saber_core.construction import METHODS, choices

    def words(model, field: str) -> set[str]:
        return set(typing.get_args(model.model_fields[field].annotation)) - {""}

    assert words(BuildConfig, "method") == set(METHODS)
    assert words(ThresholdSettings, "mode") == set(choices("thresholds"))
    assert words(TournamentSettings, "pairing") == set(choices("pairing"))
    assert words(RatingSettings, "fit") == set(choices("bt"))


def test_the_embedding_cache_is_the_homes_unless_a_shared_file_is_named(clean_env, tmp_path):
    """``embedding_cache`` (``SABER_EMBEDDING_CACHE``) moves the cache file and nothing else,
    for builds and ``saber eval`` alike; a rebuild from a manifest keeps it (a location)."""
    from saber_cli.rebuild import overriding_variables
    from saber_store.paths import SaberPaths

    home = (tmp_path / "home").resolve()
    clean_env.setenv("SABER_HOME", str(home))
    own = home / "cache" / "eval_cache.duckdb"
    assert load_build_config("tiny").eval_cache_path == own
    assert SaberPaths.for_profile("tiny").embedding_cache == own
    shared = (tmp_path / "shared" / "vectors.duckdb").resolve()
    clean_env.setenv("SABER_EMBEDDING_CACHE", str(shared))
    build = load_build_config("tiny")
    assert build.eval_cache_path == shared == build.plan().paths.embedding_cache
    assert build.database_path == home / "saber.duckdb"
    assert SaberPaths.for_profile("tiny").embedding_cache == shared
    assert "embedding_cache" not in build.explicit and overriding_variables() == []
