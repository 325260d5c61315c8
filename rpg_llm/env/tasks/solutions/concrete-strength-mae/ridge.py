"""Concrete strength: ridge regression on scaled mix proportions (optionally log age and
degree-2 interactions)."""

import numpy as np
import pandas as pd
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler

ALPHA = 1.0
LOG_AGE = True
DEGREE = 1

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "compressive_strength")]


def design(frame: pd.DataFrame) -> pd.DataFrame:
    x = frame[features].copy()
    if LOG_AGE:
        x["log_age"] = np.log1p(x["age"])
    return x


steps = [StandardScaler()]
if DEGREE > 1:
    steps += [PolynomialFeatures(degree=DEGREE, include_bias=False), StandardScaler()]
model = make_pipeline(*steps, Ridge(alpha=ALPHA))
model.fit(design(train), train["compressive_strength"])
pred = model.predict(design(test))
pd.DataFrame({"id": test["id"], "compressive_strength": pred}).to_csv("submission.csv", index=False)
