"""The sim-to-real study: does what a model learns on synthetic scenes transfer to real images?

Each method trains once on the sim domain and once on the real domain (a real dataset folder such
as SpatialSense or Rel3D converted by data/formats, or here the synthetic generator's shifted
domain, data/synthetic.py); every model, and the base model, is evaluated on both domains' test
splits. The comparison on the real domain: sim-trained against real-trained (the transfer gap)
and against the base model (whether sim training helps at all), two-proportion tests.
"""

from __future__ import annotations

from vqa_r1.experiments.study import Study


def design(b: Study) -> None:
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
            evaluations: dict[str, dict] = {where: {} for where in domains}
            for seed in b.seeds(method):  # experiment.seeds: one run per seed, each evaluated
                run = b.train(
                    b.seeded(f"runs/{method}-{trained}", seed),
                    method,
                    train_folder,
                    {"method": method, "on": trained},
                    extra=b.seed_override(seed),
                )
                for where, folder in domains.items():
                    name = b.seeded(f"eval/{method}-{trained}-on-{where}", seed)
                    b.evaluate(name, folder, {"method": method, "on": trained, "eval": where}, run)
                    evaluations[where][seed] = name
            for where in domains:
                labels = {"method": method, "trained on": trained, "evaluated on": where}
                rows.append(b.seed_row({"labels": labels}, evaluations[where]))
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
