"""What one output file costs in a ``GET /jobs/{jobId}/outputs`` answer bounds what it takes."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from functions.logic.queries import OutputFile, output_cost


@given(name=st.text(min_size=1, max_size=300), url=st.text(max_size=600), size=st.integers(0, 5 * 1024**4))
def test_an_output_costs_at_least_what_it_takes_in_the_invoke_response(name, url, size):
    file = OutputFile(name=name, size=size, url=url)
    view = {"name": name, "size": size, "url": url}

    # Powertools writes the body with json.dumps; the Lambda runtime escapes the body string again.
    assert len(json.dumps(json.dumps(view))) - len('""') + len(", ") <= output_cost(file)
