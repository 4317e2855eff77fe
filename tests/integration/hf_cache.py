"""Test helper: put tables into a Hugging Face datasets cache as if ``load_dataset`` had
downloaded them from the hub, so that an offline ``load_dataset(NAME, CONFIG)`` finds them.

Offline, ``datasets`` 5.2 answers a hub name only from its cache,
``<cache>/<owner>___<snake name>/<config>/<version>/<commit>/`` (``CachedDatasetModuleFactory``
and the ``cache`` builder). The helper runs ``load_dataset`` once on local parquet files in a
folder named like the dataset (a README declares the configs), then moves the cached copy to
the hub's folder name with the given commit as its hash.
"""

from pathlib import Path

import polars as pl


def cache_hub_dataset(
    name: str,
    tables: dict[str | None, pl.DataFrame],
    cache: Path,
    commit: str,
    scratch: Path,
) -> None:
    """Cache ``tables`` (config → train split; None = the default config) as hub dataset
    ``name`` (``owner/dataset``) at ``commit`` in the datasets cache folder ``cache``."""
    from datasets import load_dataset
    from datasets.naming import camelcase_to_snakecase

    owner, dataset = name.split("/")
    repo = scratch / owner / dataset
    configs = []
    for config, frame in tables.items():
        folder = repo / (config or "data")
        folder.mkdir(parents=True)
        frame.write_parquet(folder / "train.parquet")
        configs.append(
            f"- config_name: {config or 'default'}\n  data_files:\n  - split: train\n"
            f"    path: {folder.name}/*.parquet\n"
        )
    (repo / "README.md").write_text("---\nconfigs:\n" + "".join(configs) + "---\n")
    for config in tables:
        load_dataset(str(repo), config, split="train", cache_dir=str(cache))
    local = cache / camelcase_to_snakecase(dataset)
    hub = cache / f"{owner}___{camelcase_to_snakecase(dataset)}"
    local.rename(hub)
    for version in hub.glob("*/*"):
        (built,) = [p for p in version.iterdir() if p.is_dir()]
        built.rename(version / commit)
