"""Small local models (sentence embeddings, NLI classifiers, yes/no scorers); torch imported lazily."""
