-- The plan an organization is on, in one place: that of its latest paid
-- order (with the order), else the default plan the billing settings name;
-- no row when neither names one (nothing is limited). Read by the
-- entitlement check and by `sync-clusters`' search for organizations past
-- their plan.
CREATE FUNCTION organization_plan(organization uuid)
RETURNS TABLE (order_id uuid, plan_id uuid)
LANGUAGE sql STABLE AS $$
    SELECT order_id, plan_id FROM (
        (SELECT 0 AS rank, o.id AS order_id, o.plan_id FROM orders o
         WHERE o.organization_id = organization AND o.status = 'paid'
         ORDER BY o.paid_at DESC, o.id DESC LIMIT 1)
        UNION ALL
        (SELECT 1, NULL::uuid, s.default_plan_id FROM billing_settings s
         WHERE s.id AND s.default_plan_id IS NOT NULL)
    ) candidates
    ORDER BY rank LIMIT 1
$$;
