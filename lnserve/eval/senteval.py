"""SentEval callbacks over an lnserve model or server (see ``lnserve.app.evaluation.senteval``)::

import senteval
from lnserve.eval.senteval import batcher, prepare

params = {"task_path": "SentEval/data", "usepytorch": True, "kfold": 10,
          "lnserve_model": "artifacts/combine_skip"}  # or "lnserve_url": "http://127.0.0.1:8000"
print(senteval.engine.SE(params, batcher, prepare).eval(["MR", "SICKRelatedness"]))
"""

from lnserve.app.evaluation.senteval import batcher, prepare

__all__ = ["batcher", "prepare"]
