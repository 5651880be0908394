"""`make demo`: push a few jobs to the embedded Redis and show the raw JSON Sidekiq would see."""

from __future__ import annotations

import json

import kiq


class EnrollProduct(kiq.Job):
    kiq_options = {"queue": "critical", "retry": 5}

    def perform(self, seller_id: int, product_id: int) -> None:
        print(f"enrolling product {product_id} of seller {seller_id}")


@kiq.job(queue="mail")
def send_receipt(order_id: int) -> None:
    print(f"receipt for order {order_id}")


def main() -> None:
    redis = kiq.default_config().redis
    jid = EnrollProduct.perform_async(7, 42)
    EnrollProduct.perform_in(300, 7, 43)
    jids = EnrollProduct.perform_bulk([[7, 1], [7, 2]])
    send_receipt.perform_async(9)
    print(f"pushed {jid} and {jids} to queue:critical, one scheduled job, one to queue:mail\n")
    for key in ("queue:critical", "queue:mail"):
        print(f"{key}:")
        for raw in redis.lrange(key, 0, 2):
            print("  ", json.dumps(json.loads(raw)))
    print("schedule:")
    for raw, score in redis.zrange("schedule", 0, 0, withscores=True):
        print(f"   at {score:.3f}: {raw}")


if __name__ == "__main__":
    main()
