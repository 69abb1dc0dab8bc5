"""The launch pipeline: every way a run starts goes through these stages, in this order.

    resolve    a payload and its query (project, experiment, model and dataset versions) -> a TrainingRequest with
               a verified tracking context and the files the run will read (resolve.py)
    confine    every host path and blob the request names -> what its caller may read (confine.py)
    authorise  the capabilities and Hub target the launch implies, for its caller (authorise.py)
    check      what plan and launch share: one list of checks, collected for plan, the first raised at launch
               (check.py)
    register   the run's ledger row and its launch reservation (register.py)

pipeline.py is the entry point callers use: `prepare` (resolve, confine, authorise) and then `plan` or `launch`.
"""
