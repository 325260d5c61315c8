"""BBC news: k nearest neighbours (cosine distance) on TF-IDF vectors, vote shares as
probabilities."""

import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.neighbors import KNeighborsClassifier

K = 25
MAX_FEATURES = 5000

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
vectorizer = TfidfVectorizer(max_features=MAX_FEATURES, sublinear_tf=True, stop_words="english")
x_train = vectorizer.fit_transform(train["text"])
model = KNeighborsClassifier(n_neighbors=K, metric="cosine").fit(x_train, train["category"])
proba = model.predict_proba(vectorizer.transform(test["text"]))
sub = pd.DataFrame(proba, columns=model.classes_)
sub.insert(0, "id", test["id"])
sub.to_csv("submission.csv", index=False)
