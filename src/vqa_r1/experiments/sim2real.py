"""The sim-to-real study: does what a model learns on synthetic scenes transfer to real images?

Each method trains once on the sim domain and once on the real domain (a real dataset folder such
as SpatialSense or Rel3D converted by data/formats, or here the synthetic generator's shifted
domain, data/synthetic.py); every model, and the base model, is evaluated on both domains' test
splits. The comparison on the real domain: sim-trained against real-trained (the transfer gap)
and against the base model (whether sim training helps at all), two-proportion tests.
"""

from __future__ import annotations

from vqa_r1.experiments.builder import Builder


def plan(b: Builder) -> None:
    spec = b.spec
    domains = {"sim": b.source_dataset(), "real": b.real_dataset()}
    rows = []
    for where, folder in domains.items():
        name = f"eval/base-on-{where}"
        b.evaluate(name, folder, {"method": "base", "eval": where})
        rows.append(
            {
                "step": name,
                "labels": {"method": "base", "trained on": "none", "evaluated on": where},
            }
        )
    for method in spec.methods:
        for trained, train_folder in domains.items():
            run = b.train(
                f"runs/{method}-{trained}", method, train_folder, {"method": method, "on": trained}
            )
            for where, folder in domains.items():
                name = f"eval/{method}-{trained}-on-{where}"
                b.evaluate(name, folder, {"method": method, "on": trained, "eval": where}, run)
                labels = {"method": method, "trained on": trained, "evaluated on": where}
                rows.append({"step": name, "labels": labels})
    b.declare_table(
        {
            "name": "accuracy",
            "title": f"Sim-to-real: accuracy on each domain's {spec.eval_split} split",
            "rows": rows,
            "per_relation": True,
            "tests": [
                {
                    "kind": "versus",
                    "within": "method",
                    "match": ["evaluated on"],
                    "reference": {"trained on": "real"},
                },
                {"kind": "versus", "match": ["evaluated on"], "reference": {"method": "base"}},
            ],
            "plots": [
                {
                    "kind": "bars",
                    "group": "evaluated on",
                    "hue": "trained on",
                    "facet": "method",
                    "file": "accuracy_by_domain.png",
                }
            ],
        }
    )
