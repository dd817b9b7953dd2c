"""The worker's negative controls as a table (`04e_worker_controls`): for every model with a committed phase 4 record,
the table gives the record's controls, in its order, each with the catcher the record expected."""

import json

import pytest

from moe_bench.parallel_worker import BALANCE_CONTROL, parallel_test_model
from moe_bench.sharding import model_plan
from moe_bench.worker_controls import negative_plans

from conftest import REPO

# the worker's own controls, not wrong plans: a sampling router's noise rows, the load-balancing count's reduction
OWN = ("wrong noise rows", BALANCE_CONTROL)
RECORDS = {
    p.parent.name: [(c["name"], c["expected"]) for c in rec["negative_controls"] if not c["name"].startswith(OWN)]
    for p in sorted((REPO / "reports").glob("*/parallelism.json"))
    if (rec := json.loads(p.read_text())).get("negative_controls")
}


def test_the_records_hold_controls():
    "Negative control: the records are read (most phase 4 records hold controls)."
    assert len(RECORDS) > 50 and all(RECORDS.values())


@pytest.mark.parametrize("model", sorted(RECORDS))
def test_the_table_gives_the_recorded_controls(model):
    base, cfg, _ = parallel_test_model(model)
    plans = negative_plans(model_plan(base), getattr(cfg, "base_model_tp_plan", None), base)
    assert [(label, catcher) for label, _, _, catcher in plans] == RECORDS[model]
