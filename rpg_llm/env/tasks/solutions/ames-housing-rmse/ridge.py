"""Ames housing: ridge regression on log price, scaled numerics (and one-hot categoricals)."""

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

ALPHA = 10.0
FEATURES = "all"  # or "numeric"

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "Sale_Price")]
categorical = list(train[features].select_dtypes(exclude="number").columns)
numeric = [c for c in features if c not in categorical]
for frame in (train, test):
    frame[categorical] = frame[categorical].fillna("missing")
parts = [("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numeric)]
if FEATURES == "all":
    parts.append(("cat", OneHotEncoder(handle_unknown="ignore"), categorical))
model = make_pipeline(ColumnTransformer(parts), Ridge(alpha=ALPHA))
model.fit(train[features], np.log(train["Sale_Price"]))
pred = np.exp(model.predict(test[features]))
pd.DataFrame({"id": test["id"], "Sale_Price": pred}).to_csv("submission.csv", index=False)
