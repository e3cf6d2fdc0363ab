"""What each command reports, assembled from the library (no I/O): the results `bill`, `plan`,
`prescribe` and `emit` render or print as JSON (`to_json()`)."""
