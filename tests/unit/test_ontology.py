"""Ontology: validation, Seco IC, Lin, BMA against hand computation and a brute-force reference."""

import math

import networkx as nx
import numpy as np
import polars as pl
import pytest

from saber_core.inputs.formats import load_ontology, read_ontology_frame, write_ontology_frame
from saber_core.ontology.dag import VIRTUAL_ROOT, OntologyError, build_ontology
from saber_core.signals.lin_bma import bma, bma_one_vs_many, lin, lin_rows, topic_sets


def frame(rows):
    return pl.DataFrame(
        {
            "node_id": [r[0] for r in rows],
            "name": [r[0].lower() for r in rows],
            "parent_ids": [list(r[1]) for r in rows],
        },
        schema_overrides={"parent_ids": pl.List(pl.String)},
    )


# R ─ A ─ C          D has two parents (A and B): a DAG, not a tree.
#   │   └─ D
#   └ B ─┘
#       └─ E ─ F
SMALL = [
    ("R", []),
    ("A", ["R"]),
    ("B", ["R"]),
    ("C", ["A"]),
    ("D", ["A", "B"]),
    ("E", ["B"]),
    ("F", ["E"]),
]


@pytest.fixture
def small():
    return build_ontology(frame(SMALL))


def ic_by_hand(desc: int, n: int = 7) -> float:
    return 1 - math.log(desc + 1) / math.log(n)


def test_seco_ic_by_hand(small):
    # descendants: R 6, A {C,D} 2, B {D,E,F} 3, E {F} 1, leaves 0
    expected = {
        "R": 0.0,
        "A": ic_by_hand(2),
        "B": ic_by_hand(3),
        "C": 1.0,
        "D": 1.0,
        "E": ic_by_hand(1),
        "F": 1.0,
    }
    for node, value in expected.items():
        assert small.ic[small.index[node]] == pytest.approx(value, abs=1e-12)
    assert small.ic[small.index["R"]] == 0.0


def test_lin_by_hand(small):
    i = small.index
    # MICA(C, D) = A ; MICA(D, F) = B (D's second parent) ; MICA(C, F) = R (IC 0)
    assert lin(small, i["C"], i["D"]) == pytest.approx(2 * ic_by_hand(2) / 2)
    assert lin(small, i["D"], i["F"]) == pytest.approx(2 * ic_by_hand(3) / 2)
    assert lin(small, i["C"], i["F"]) == 0.0
    assert lin(small, i["E"], i["F"]) == pytest.approx(2 * ic_by_hand(1) / (ic_by_hand(1) + 1))
    assert lin(small, i["A"], i["A"]) == 1.0
    assert lin(small, i["R"], i["R"]) == 1.0


def test_bma_by_hand(small):
    i = small.index
    a, b = [i["C"], i["D"]], [i["F"]]
    # rows: C→F 0, D→F lin_DF ; column: F→ max(0, lin_DF)
    lin_df = ic_by_hand(3)
    expected = 0.5 * ((0 + lin_df) / 2 + lin_df / 1)
    assert bma(small, a, b) == pytest.approx(expected)
    assert bma(small, a, b) == pytest.approx(bma(small, b, a))
    assert bma(small, a, a) == pytest.approx(1.0)
    assert bma(small, a, []) == 0.0


def test_virtual_root_for_several_roots():
    onto = build_ontology(frame([("X", []), ("Y", []), ("Z", ["X"])]))
    assert onto.virtual_root_added
    assert onto.node_ids[onto.root] == VIRTUAL_ROOT
    assert onto.n_nodes == 4
    assert onto.ic[onto.root] == 0.0
    assert lin(onto, onto.index["Z"], onto.index["Y"]) == 0.0


def test_cycle_names_its_nodes():
    with pytest.raises(OntologyError) as err:
        build_ontology(frame([("R", []), ("A", ["R", "C"]), ("B", ["A"]), ("C", ["B"])]))
    message = str(err.value)
    assert "cycle" in message
    for node in ("A", "B", "C"):
        assert repr(node) in message
    assert "'R'" not in message


def test_unknown_parent_names_node_and_parent():
    with pytest.raises(OntologyError, match=r"node 'A' has parent 'Q'"):
        build_ontology(frame([("R", []), ("A", ["Q"])]))


def test_duplicate_and_empty_ids_name_rows():
    with pytest.raises(OntologyError, match=r"'A' at rows \[1, 2\]"):
        build_ontology(frame([("R", []), ("A", ["R"]), ("A", ["R"])]))
    with pytest.raises(OntologyError, match=r"rows \[1\] have an empty node_id"):
        build_ontology(frame([("R", []), ("", ["R"])]))


def random_dag(rng: np.random.Generator, n: int) -> pl.DataFrame:
    rows = [("n0", [])]
    for k in range(1, n):
        n_parents = 1 + int(rng.random() < 0.3)
        parents = {f"n{p}" for p in rng.integers(0, k, size=n_parents)}
        rows.append((f"n{k}", sorted(parents)))
    return frame(rows)


def brute_force_lin(graph: nx.DiGraph, n: int, a: str, b: str) -> float:
    """Lin straight from the definitions, with networkx ancestors/descendants."""

    def ic(x):
        return 1 - math.log(len(nx.descendants(graph, x)) + 1) / math.log(n)

    if a == b:
        return 1.0
    common = (nx.ancestors(graph, a) | {a}) & (nx.ancestors(graph, b) | {b})
    denominator = ic(a) + ic(b)
    return 2 * max(ic(c) for c in common) / denominator if denominator > 0 else 0.0


def brute_force_bma(graph, n, a_set, b_set):
    if not a_set or not b_set:
        return 0.0
    rows = [max(brute_force_lin(graph, n, a, b) for b in b_set) for a in a_set]
    cols = [max(brute_force_lin(graph, n, a, b) for a in a_set) for b in b_set]
    return 0.5 * (sum(rows) / len(rows) + sum(cols) / len(cols))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorized_bma_equals_brute_force_on_random_dags(seed):
    rng = np.random.default_rng(seed)
    f = random_dag(rng, 40)
    onto = build_ontology(f)
    graph = nx.DiGraph()
    for node, parents in zip(f["node_id"], f["parent_ids"], strict=True):
        graph.add_node(node)
        graph.add_edges_from((p, node) for p in parents)
    ids = f["node_id"].to_list()
    # descendant counts agree with networkx
    expected_desc = [len(nx.descendants(graph, x)) for x in ids]
    assert onto.descendant_counts().tolist() == expected_desc

    docs = [list(rng.choice(ids, size=rng.integers(0, 5), replace=False)) for _ in range(25)]
    query = list(rng.choice(ids, size=4, replace=False))
    sets = topic_sets([onto.indices(d) for d in docs])
    table = lin_rows(onto, onto.indices(query), sets.used)
    fast = bma_one_vs_many(table, sets)
    slow = [brute_force_bma(graph, len(ids), set(query), set(d)) for d in docs]
    np.testing.assert_allclose(fast, slow, atol=1e-6)
    scalar = [bma(onto, onto.indices(query), onto.indices(d)) for d in docs]
    np.testing.assert_allclose(scalar, slow, atol=1e-6)


def test_bma_properties_symmetric_and_bounded():
    rng = np.random.default_rng(7)
    f = random_dag(rng, 60)
    onto = build_ontology(f)
    for _ in range(50):
        a = rng.integers(0, onto.n_nodes, size=rng.integers(1, 6))
        b = rng.integers(0, onto.n_nodes, size=rng.integers(1, 6))
        value = bma(onto, a, b)
        assert 0.0 <= value <= 1.0 + 1e-9
        assert value == pytest.approx(bma(onto, b, a), abs=1e-9)


@pytest.mark.parametrize("suffix", [".csv", ".json", ".jsonl", ".parquet"])
def test_file_formats_round_trip(tmp_path, suffix):
    path = tmp_path / f"onto{suffix}"
    write_ontology_frame(frame(SMALL), path)
    loaded = read_ontology_frame(path)
    assert loaded["node_id"].to_list() == [r[0] for r in SMALL]
    assert [sorted(p) for p in loaded["parent_ids"].to_list()] == [sorted(r[1]) for r in SMALL]
    onto = load_ontology(path)
    np.testing.assert_allclose(onto.ic, build_ontology(frame(SMALL)).ic)


def test_csv_parents_separated_by_pipe(tmp_path):
    path = tmp_path / "o.csv"
    path.write_text("node_id,name,parent_ids\nR,root,\nA,a,R\nB,b,R\nD,d,A|B\n")
    onto = load_ontology(path)
    assert sorted(onto.node_ids[onto.parents_of(onto.index["D"])]) == ["A", "B"]


def test_unsupported_format(tmp_path):
    with pytest.raises(OntologyError, match="unsupported ontology format"):
        load_ontology(tmp_path / "o.xml")
