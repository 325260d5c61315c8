"""Leaf species: multinomial logistic regression on scaled numerics (and one-hot categoricals)."""

import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

C = 10.0
FEATURES = "all"  # or "numeric"

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
features = [c for c in train.columns if c not in ("id", "species")]
categorical = list(train[features].select_dtypes(exclude="number").columns)
numeric = [c for c in features if c not in categorical]
parts = [("num", StandardScaler(), numeric)]
if FEATURES == "all":
    parts.append(("cat", OneHotEncoder(handle_unknown="ignore"), categorical))
model = make_pipeline(ColumnTransformer(parts), LogisticRegression(C=C, max_iter=2000))
model.fit(train[features], train["species"])
sub = pd.DataFrame(model.predict_proba(test[features]), columns=model.classes_)
sub.insert(0, "id", test["id"])
sub.to_csv("submission.csv", index=False)
