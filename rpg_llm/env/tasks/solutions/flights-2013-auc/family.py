"""NYC flights 2013: scaled schedule numbers, one-hot carrier / airports, one family picked by
MODEL. With 80,000 training rows the biggest settings run for minutes."""

import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

MODEL = "hgb"  # one of "hgb", "knn", "logreg", "nb", "rf"
C = 1.0  # logreg: inverse regularisation strength
MAX_ITER = 100  # hgb: boosting iterations
LEARNING_RATE = 0.1  # hgb
MAX_LEAF_NODES = 31  # hgb: leaves per tree
N_ESTIMATORS = 100  # rf: trees
MIN_SAMPLES_LEAF = 20  # rf: smallest leaf (smaller: bigger forests)
K = 50  # knn: neighbours
SUBSAMPLE = 1.0  # fraction of the training rows used
FOLDS = 0  # k-fold cross-validated AUC printed before the final fit: 0, 3 or 5 (0: none)
SEED = 0

families = {
    "hgb": lambda: HistGradientBoostingClassifier(
        max_iter=MAX_ITER,
        learning_rate=LEARNING_RATE,
        max_leaf_nodes=MAX_LEAF_NODES,
        early_stopping=False,
        random_state=SEED,
    ),
    "knn": lambda: KNeighborsClassifier(K),
    "logreg": lambda: LogisticRegression(C=C, max_iter=2000),
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
categorical = list(train.select_dtypes(exclude="number").columns)  # carrier, origin, dest
numeric = [c for c in train.columns if c not in ["id", "late", *categorical]]
columns = ColumnTransformer(
    [
        ("num", StandardScaler(), numeric),
        ("cat", OneHotEncoder(handle_unknown="ignore", sparse_output=False), categorical),
    ]
)
model = make_pipeline(columns, families[MODEL]())
features = train.drop(columns=["id", "late"])
if FOLDS:
    auc = cross_val_score(model, features, train["late"], cv=FOLDS, scoring="roc_auc")
    print(f"{FOLDS}-fold cross-validated AUC {auc.mean():.4f}")
model.fit(features, train["late"])
proba = model.predict_proba(test.drop(columns=["id"]))[:, 1]
pd.DataFrame({"id": test["id"], "late": proba}).to_csv("submission.csv", index=False)
