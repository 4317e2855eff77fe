"""The topic ontology: the DAG of a node file with Seco IC (:mod:`.dag`, platform), the path tree
of the corpus' tag paths with corpus-frequency counts (:mod:`.tag_paths`, published) and tag-set
clean-up (:mod:`.tag_cleanup`)."""
