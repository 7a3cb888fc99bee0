"""placeholder replaced below"""

from fastapi import APIRouter

router = APIRouter()
