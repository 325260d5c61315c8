"""BBC news: random forest on a small TF-IDF vocabulary."""

import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.feature_extraction.text import TfidfVectorizer

N_ESTIMATORS = 50
SEED = 0

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
vectorizer = TfidfVectorizer(max_features=2000, stop_words="english")
x_train = vectorizer.fit_transform(train["text"])
model = RandomForestClassifier(n_estimators=N_ESTIMATORS, random_state=SEED, n_jobs=1)
model.fit(x_train, train["category"])
proba = model.predict_proba(vectorizer.transform(test["text"]))
sub = pd.DataFrame(proba, columns=model.classes_)
sub.insert(0, "id", test["id"])
sub.to_csv("submission.csv", index=False)
