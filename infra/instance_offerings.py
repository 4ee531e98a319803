"""Which of the compute pools' instance types each AWS region offers, and the synth-time check.

The table (``infra/instance_offerings.json``, committed) is generated from the EC2 instance-type
offerings moto ships (``moto/ec2/resources/instance_type_offerings/region/<region>.json.gz``, a
snapshot of EC2 ``DescribeInstanceTypeOfferings`` with ``LocationType=region``), reduced to the
types the pools name: a family (``m7i``) is offered when any of its sizes is, a size
(``r8i.96xlarge``) when that size is. Regenerate it after changing a pool or upgrading moto::

    make instance-offerings        # = python -m infra.instance_offerings

Synth reads only the committed file, so it needs neither moto nor an AWS account.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from infra import constants

TABLE_PATH = constants.REPO_ROOT / "infra" / "instance_offerings.json"
MOTO_OFFERINGS = Path("ec2") / "resources" / "instance_type_offerings" / "region"


class InstanceTypesNotOffered(ValueError):
    """A configured region does not offer every instance type of a compute pool."""


def pool_instance_types(pools: Iterable[constants.ComputePool]) -> list[str]:
    """Every instance type or family the pools name, sorted and without duplicates."""
    return sorted({name for pool in pools for name in pool.instance_types})


def _offered(wanted: Iterable[str], offered_sizes: set[str]) -> list[str]:
    families = {size.split(".", 1)[0] for size in offered_sizes}
    return sorted(name for name in wanted if name in (offered_sizes if "." in name else families))


def generate(types: Iterable[str], moto_root: Path) -> dict[str, Any]:
    """Build the table from moto's per-region offering files.

    Parameters
    ----------
    types : Iterable[str]
        The families and sizes to look for.
    moto_root : Path
        The installed ``moto`` package folder.

    Returns
    -------
    dict
        ``{"source": str, "types": [...], "regions": {"<region>": [offered types, sorted]}}``.
    """
    wanted = sorted(set(types))
    regions: dict[str, list[str]] = {}
    for path in sorted((moto_root / MOTO_OFFERINGS).glob("*.json.gz")):
        with gzip.open(path, "rt") as file:
            sizes = {str(item["InstanceType"]) for item in json.load(file)}
        regions[path.name.removesuffix(".json.gz")] = _offered(wanted, sizes)
    source = (
        f"moto {metadata.version('moto')}: moto/{MOTO_OFFERINGS.as_posix()}/<region>.json.gz "
        "(EC2 DescribeInstanceTypeOfferings, LocationType=region); regenerate: make instance-offerings"
    )
    return {"source": source, "types": wanted, "regions": regions}


def format_table(table: Mapping[str, Any]) -> str:
    """The table as committed: JSON with one line per region, so a diff shows what changed where."""
    rows = ",\n".join(
        f"  {json.dumps(region)}: {json.dumps(types)}" for region, types in table["regions"].items()
    )
    return (
        f'{{\n "source": {json.dumps(table["source"])},\n "types": {json.dumps(table["types"])},\n'
        f' "regions": {{\n{rows}\n }}\n}}\n'
    )


def load_table(path: Path = TABLE_PATH) -> dict[str, Any]:
    """The committed table (see ``generate`` for its shape)."""
    table: dict[str, Any] = json.loads(path.read_text())
    return table


def check_pools(
    region: str, pools: Mapping[str, constants.ComputePool], table: Mapping[str, Any] | None = None
) -> None:
    """Refuse a region that lacks any instance type of the pools.

    Raises
    ------
    InstanceTypesNotOffered
        Naming the region, each missing type and the pool (and its machine classes) that needs it;
        also when the table has no row for the region or was built without one of the pools' types.
    """
    table = load_table() if table is None else table
    unknown = sorted(set(pool_instance_types(pools.values())) - set(table["types"]))
    if unknown:
        raise InstanceTypesNotOffered(
            f"infra/instance_offerings.json does not list {', '.join(unknown)}: run `make instance-offerings`"
        )
    if region not in table["regions"]:
        raise InstanceTypesNotOffered(
            f"region {region} is not in infra/instance_offerings.json ({table['source']})"
        )
    offered = set(table["regions"][region])
    missing = [
        f"{name} (pool {pool.name}: {', '.join(_classes_of(pool.name))})"
        for pool in pools.values()
        for name in pool.instance_types
        if name not in offered
    ]
    if missing:
        raise InstanceTypesNotOffered(
            f"region {region} does not offer {'; '.join(missing)}. Choose a region that offers them "
            "(infra/instance_offerings.json lists each region's) or give the pool other types there "
            "with the instancePools context."
        )


def _classes_of(pool_name: str) -> list[str]:
    return [name for name, pool in constants.MACHINE_CLASS_POOLS.items() if pool == pool_name]


def main() -> None:
    """Write ``infra/instance_offerings.json`` from the installed moto (a dev/local dependency)."""
    import moto

    table = generate(pool_instance_types(constants.COMPUTE_POOLS.values()), Path(moto.__file__).parent)
    TABLE_PATH.write_text(format_table(table))
    print(f"{TABLE_PATH.relative_to(constants.REPO_ROOT)}: {len(table['regions'])} regions, {table['types']}")


if __name__ == "__main__":
    main()
