"""Reading captures: the Capture data model, one thin reader per trainer format, synthetic captures."""
