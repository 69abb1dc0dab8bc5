"""The HTTP surface: the FastAPI app, its middleware and routing, and one APIRouter module per resource."""
