"""Where trials run: backends behind one interface, found through an entry-point group."""
