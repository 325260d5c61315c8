"""Credit-card default: scaled balance and income, a student flag, optional polynomial terms
(DEGREE), and one model family picked by MODEL."""

import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, PolynomialFeatures, StandardScaler

MODEL = "rf"  # one of "hgb", "knn", "logreg", "nb", "rf"
DEGREE = 1  # polynomial terms of the features up to this degree (1: the features as they are)
C = 1.0  # logreg: inverse regularisation strength
N_ESTIMATORS = 500  # rf: trees
MIN_SAMPLES_LEAF = 20  # rf: smallest leaf
MAX_ITER = 200  # hgb: boosting iterations
LEARNING_RATE = 0.03  # hgb
MAX_DEPTH = 3  # hgb: depth limit (None: none)
K = 100  # knn: neighbours
SUBSAMPLE = 1.0  # fraction of the training rows used
FOLDS = 0  # k-fold cross-validated AUC printed before the final fit: 0, 3 or 5 (0: none)
SEED = 0

families = {
    "hgb": lambda: HistGradientBoostingClassifier(
        max_iter=MAX_ITER,
        learning_rate=LEARNING_RATE,
        max_depth=MAX_DEPTH,
        early_stopping=False,
        random_state=SEED,
    ),
    "knn": lambda: KNeighborsClassifier(K),
    "logreg": lambda: LogisticRegression(C=C, max_iter=5000),
    "nb": lambda: GaussianNB(),
    "rf": lambda: RandomForestClassifier(
        N_ESTIMATORS, min_samples_leaf=MIN_SAMPLES_LEAF, random_state=SEED
    ),
}
if MODEL not in families:
    raise ValueError(f"MODEL {MODEL!r} is not one of {', '.join(map(repr, sorted(families)))}")

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
if SUBSAMPLE < 1.0:
    train = train.sample(frac=SUBSAMPLE, random_state=SEED)
features = train.drop(columns=["id", "default"])
steps = [
    ColumnTransformer(
        [
            ("num", StandardScaler(), ["balance", "income"]),
            ("cat", OneHotEncoder(drop="first", sparse_output=False), ["student"]),
        ]
    )
]
if DEGREE > 1:
    steps += [PolynomialFeatures(DEGREE, include_bias=False), StandardScaler()]
model = make_pipeline(*steps, families[MODEL]())
if FOLDS:
    auc = cross_val_score(model, features, train["default"], cv=FOLDS, scoring="roc_auc")
    print(f"{FOLDS}-fold cross-validated AUC {auc.mean():.4f}")
model.fit(features, train["default"])
proba = model.predict_proba(test.drop(columns=["id"]))[:, 1]
pd.DataFrame({"id": test["id"], "default": proba}).to_csv("submission.csv", index=False)
