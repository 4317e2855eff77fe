"""The tournament: Swiss pairing (:mod:`.swiss`, platform; :mod:`.swiss_published`, the published
rules), information and adaptive pairing (:mod:`.pairing`, :mod:`.matching`, :mod:`.adaptive`),
presentation order (:mod:`.presentation`) and rounds as judgment tables
(:mod:`.judgment_table`)."""
