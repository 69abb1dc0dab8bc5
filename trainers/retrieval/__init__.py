"""The embedding-retriever workflow: the shipped retrieval corpus, its tiny model and its evaluation."""
